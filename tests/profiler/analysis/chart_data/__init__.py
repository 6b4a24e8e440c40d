"""Tests of the Profile view's chart records (`profiler.analysis.chart_data`)."""
