"""Synthetic traces with a profile's shape: `synth`, with its `arrivals` and shared-`prefix` block
hashes.
"""
