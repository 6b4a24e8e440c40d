"""The recommendation: candidate search and scoring (`search`, `scoring`), the pick (`decide`), how
far it holds (`capacity`, `fleet`, `pricing`, `routing`), why (`reasons`), the entry point and
its records (`recommend`, `recommendation`), and the kept history (`history`).
"""
