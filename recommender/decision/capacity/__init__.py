"""How far a deployment holds and what it costs: one simulated load and the limit that binds
(`trial`), the SLO boundary on the user's own trace (`boundary`), the plan with growth and
load curves (`plan`), the fleet over the day (`fleet`) and $/Mtok from a GPU-hour price
(`pricing`).
"""
