"""Chart-ready summaries of the workspace's `requests` table, for the web app's Profile view: each
query runs in DuckDB with bound parameters and returns a small typed record (at most a few
thousand numbers), so a chart never needs the trace in memory. One module per kind of chart
(arrival series, log-binned distributions, prefix-reuse curve, per-model split, segment
outlines); `profile_view` gathers them into the one record the view draws.
"""
