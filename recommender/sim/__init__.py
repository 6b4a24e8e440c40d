"""The serving simulator: one replica's scheduler iterated over the user's own requests
(`simulator`, its numba `kernel`, the engines' `policies`, the requests it can never serve
`refusals`), what it returns (`result`), the trace window and lengths it runs on
(`trace_window`, `lengths`), and `predict` through it (`predict`).
"""
