"""Calibration: fitting the performance model to published or measured rows (`fitting`,
`calibrate`, `refit`) and the held-out errors and intervals a prediction carries (`bands`).
"""
