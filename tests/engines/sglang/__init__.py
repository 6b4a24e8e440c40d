"""Tests of the SGLang plug-in (`engines.sglang`)."""
