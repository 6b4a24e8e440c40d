"""The catalogs: bundled GPUs and models (`lookup`, matching names by `names`), their typed
records (`specs`), a Hugging Face config as a model (`hf_config`), the configs
aiconfigurator-core bundles (`bundled`), and the facts handed to the engines' capability checks
(`facts`).
"""
