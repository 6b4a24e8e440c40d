"""The load generator: what to send (`workloads`, `prompts`, `schemas`), sending it (`generator`,
`process`, `workers`, `client`, `rawhttp`, `sse`, `stamped_socket`), and the per-request
`failures`.
"""
