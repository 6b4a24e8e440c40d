"""The SGLang plug-in (`plugin`), with the settings behind its flags and `--config` YAML
rendered from an EngineConfig (`settings`) and read back from a config file (`readback`).
"""
