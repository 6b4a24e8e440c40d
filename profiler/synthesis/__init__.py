"""Synthetic traces with a profile's shape: `synth` drawing them chunk by chunk from its
`arrivals`, `lengths`, `sessions` and shared-`prefix` block hashes, and writing them.
"""
