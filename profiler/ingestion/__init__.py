"""Reading a trace of any format into the canonical `requests` table: opening and sniffing
(`sources`), columns and timestamps, text traces (`text`, `textblocks`), checks, one-line
diagnoses of a failed read (`diagnose`, `rescan`), and `ingest` itself.
"""
