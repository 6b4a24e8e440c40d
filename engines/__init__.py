"""Engine plug-ins: one module per framework (`vllm`, `sglang`, `trtllm`), looked up by kind
in `registry`; what they share (`base`, `common`, `config`), and the export bundle.
"""
