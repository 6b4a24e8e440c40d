"""The vLLM plug-in (`plugin`), with the spellings of our values in its flags (`spellings`), the
reading of its config file back (`readback`), the `vllm serve` flags it knows (`flags`) and
what `extra_args` may add to them (`extra_args`).
"""
