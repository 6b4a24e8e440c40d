"""A live benchmark from start to end (`bench`: what it is asked in `bench_request`, the run
while it goes in `live_run`, what it produced in `bench_report`; the `bench` command's
`options`, made into a request in `from_options`), its figures (`metrics`, `boundary`), the
results `store`, and how a run ends when told to (`shutdown`).
"""
