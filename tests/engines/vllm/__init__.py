"""Tests of the vLLM plug-in (`engines.vllm`), against its own parser where it is installed."""
