"""The catalogs: bundled GPUs and models (`lookup`), their typed records (`specs`), a Hugging Face
config as a model (`hf_config`), and the facts handed to the engines' capability checks
(`facts`).
"""
