"""Exported manifests validate against the schemas of what they claim to be.

docker-compose.yaml against the Compose Specification JSON schema (vendored in
tests/data/schemas/), kubernetes.yaml's documents against the official Kubernetes schemas
shipped by `kubernetes-validate` (strict: unknown fields are errors), for every engine and for
configs that exercise GPUs, shared memory, config-file mounts and hostile model names.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from engines.export.bundle import render_bundle
from engines.export.request import ExportRequest
from engines.registry import ENGINES

SCHEMAS = Path(__file__).resolve().parents[2] / "data" / "schemas"
K8S_VERSION = "1.33.0"

CONFIGS = {
    "plain": {},
    "tp2_fp8": {"tp": 2, "kv_cache_dtype": "fp8", "max_num_seqs": 128},
    "hostile_model": {"model": "org/m'; touch /tmp/x; echo \"$(id)\" $HOME"},
}


def _request(kind: str, fields: dict) -> ExportRequest:
    config = {"engine": kind, "model": "Qwen/Qwen3-8B", **fields}
    return ExportRequest.model_validate({"config": config, "gpu": "H100-SXM", "gpu_count": 8,
                                         "model_cache_dir": "/srv/hf-cache"})


@pytest.fixture(scope="module")
def compose_schema():
    schema = json.loads((SCHEMAS / "compose_spec.json").read_text())
    return jsonschema.Draft201909Validator(schema)


@pytest.mark.parametrize("kind", sorted(ENGINES))
@pytest.mark.parametrize("name", list(CONFIGS))
def test_compose_file_follows_the_compose_spec(compose_schema, kind, name):
    files = render_bundle(_request(kind, CONFIGS[name]))
    compose = yaml.safe_load(files["docker-compose.yaml"])
    errors = sorted(compose_schema.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    service = next(iter(compose["services"].values()))
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


@pytest.mark.parametrize("kind", sorted(ENGINES))
@pytest.mark.parametrize("name", list(CONFIGS))
def test_kubernetes_manifest_follows_the_kubernetes_schemas(kind, name):
    files = render_bundle(_request(kind, CONFIGS[name]))
    docs = [d for d in yaml.safe_load_all(files["kubernetes.yaml"]) if d]
    assert {"Deployment", "Service"} <= {d["kind"] for d in docs}
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_schemas_do_reject_a_broken_manifest(compose_schema):
    files = render_bundle(_request("vllm", {}))
    compose = yaml.safe_load(files["docker-compose.yaml"])
    service = next(iter(compose["services"].values()))
    service["ports"] = {"not": "a list"}
    assert list(compose_schema.iter_errors(compose))
    deployment = next(d for d in yaml.safe_load_all(files["kubernetes.yaml"])
                      if d and d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
