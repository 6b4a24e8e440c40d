"""The published measurements (data/calibration/published_calibration.csv.gz) as calibration
rows: what the CSV's labels and columns mean (`labels`, `columns`), who published each row
(`sources`), one `CalRow` per usable CSV row (`parse`) and the filters that keep one figure per
measurement of a run (`runs`). No fitting here (`recommender.calibration.fitting`).
"""
