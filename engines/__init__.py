"""Engine plug-ins: one sub-package per framework (`vllm/`, `sglang/`, `trtllm/`), looked up by
kind in `registry`; what they share (the contract in `base`, `config`, `facts`, `errors`, and
the helpers in `containers`, `capability`, `layout`, `rendering`, `readback`), and the export
bundle (`export/`).
"""
