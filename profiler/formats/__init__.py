"""Trace formats: one plug-in module per format (`azure`, `burstgpt`, `mooncake`, ...), their
shared records (`base`), and the `registry` keyed by kind.
"""
