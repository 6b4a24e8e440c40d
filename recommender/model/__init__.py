"""The performance model: what one engine step costs (`perf`, `steptime`, `steptime_aic`), its
fitted parameters (`params`), where a GPU's memory goes (`memory`), speculative decoding
(`speculative`), the closed-form steady state (`steady`), and the deployment one EngineConfig
resolves to (`defaults`, `resolve`).
"""
