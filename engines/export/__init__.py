"""The deployment bundle of one EngineConfig: the request it packages (`request`, read from
`rec.json` by `loading`), its shell scripts (`shell`), the compose and Kubernetes manifests
(`manifests`, from the plug-in's `docker run` read by `docker_args`, with the path
`placeholders` each format resolves), the report (`report`) and the all-or-nothing install
(`install`); `bundle` puts them together.
"""
