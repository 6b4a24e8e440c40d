"""What every stage shares, and nothing else: the error tree (`core.errors`), the one
latency-distribution and serving-figures record (`core.figures`), the load spec
(`core.load`), arrival processes (`core.arrivals`), atomic writes (`core.atomic`) and the
event-loop helpers (`core.loop`).

A leaf: it imports nothing else of ours, so every package may import it.
"""
