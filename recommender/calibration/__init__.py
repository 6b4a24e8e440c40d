"""Calibration: fitting the performance model to published or measured rows (the rows in
`cal_row`, the published CSV read by `published`, what the model answers for a row in
`answers`, the fitted `parameters`, the fit in `fitting`, the commands `calibrate` and `refit`)
and the held-out errors and intervals a prediction carries (`cells`, `bands_file`, `bands`).
"""
