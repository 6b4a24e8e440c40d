"""The recommendation: what a search runs for (`goals`), the candidate grid and its variants
(`grid`, `variants`), the staged search and scoring (`search`, `scoring`), the pick
(`decide`), how far it holds and what it costs (`capacity/`), routing (`routing`), why and
what to watch (`explanation/`), the entry point and its records (`recommend`,
`recommendation`, `inputs`, `export_view`), and the kept history (`history`).
"""
