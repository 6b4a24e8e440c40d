"""Why the pick, and what to watch: the context explanations look at (`context`) and how they
phrase a figure (`phrases`), the reasons tied to profile figures (`reasons`), a window the pick
cannot serve or SLOs it cannot meet and what would (`shortfall`), and the other warnings
(`caveats`).
"""
