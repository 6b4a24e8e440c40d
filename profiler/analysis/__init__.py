"""The load profile of the `requests` table (`profile`, with `quantiles`, `segments`, `kmeans`,
`prefix` reuse and `ngram_acceptance`), its chart data, and the backends that compute it
(DuckDB, Spark).
"""
