"""The TensorRT-LLM plug-in (`plugin`), with the two halves of a `trtllm-serve` launch (CLI
flags and the `--extra_llm_api_options` mapping) rendered from an EngineConfig (`settings`) and
read back (`readback`).
"""
