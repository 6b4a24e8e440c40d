"""Tests of the TensorRT-LLM plug-in (`engines.trtllm`)."""
