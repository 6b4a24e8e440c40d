"""Reading a trace of any format into the canonical `requests` table: sniffing (`sniff`) and
opening (`sources`), columns and timestamps, staging table traces (`table`) and text traces
(`text`, `textblocks`), checks, one-line diagnoses of a failed read (`diagnose`, `rescan`), and
`ingest` itself.
"""
