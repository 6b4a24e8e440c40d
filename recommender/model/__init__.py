"""The performance model: what one engine step costs (`perf`, `steptime`, and the measured
provider `steptime_aic` over aiconfigurator's `aic_cells` and `aic_tables`), its fitted
parameters (`params`), where a GPU's memory goes (`memory`, what weights and KV take in
`footprint`), speculative decoding (`speculative`), the closed-form steady state (`steady`),
and the deployment one EngineConfig resolves to (`defaults`, `resolve`).
"""
