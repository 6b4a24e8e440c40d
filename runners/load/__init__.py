"""The load generator: what to send (`workload_spec`, the `workloads` kinds and the `schedule`
they give, `prompts`, `schemas`), sending it (`generator`, `process`, `workers`, `client`,
`rawhttp`, `sse`, `stamped_socket`), and the per-request `failures`.
"""
