"""The numba iteration loop behind `recommender.sim.simulator`: one engine replica, one
scheduler iteration per loop turn (vLLM V1-like): running requests first, then admissions
from the waiting queue, KV blocks with an LRU prefix cache, recompute preemption. The
simulator owns the semantics, validation and allocation; these functions trust their inputs.
The folder holds the arrays' layouts (`coefficients`, `spec_coefficients`, `settings`,
`state`), the KV pool and prefix cache (`cache`), where each request is (`queues`), what the
loop measures (`record`), the step time (`step_time`: the step formula in closed form over
the coefficients `perf.step_coefficients` derives from its own figures, or a measured
provider's table, `recommender.model.steptime_aic`), one step's batch (`schedule`), what
follows a step (`advance`) and the loop itself (`loop.run`).
"""
