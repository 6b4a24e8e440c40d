"""The load generator: what to send (a `core.load.LoadSpec` made a `schedule` by `workloads`
and, for a trace or sent requests, `replay`; `prompts`, `schemas`), sending it (`generator`,
`process`, `workers`, `client`, `rawhttp`, `sse`, `stamped_socket`), and the per-request
`failures`.
"""
