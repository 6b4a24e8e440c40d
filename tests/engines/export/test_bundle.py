"""The deployment bundle: files and their content, quoting that survives a hostile model name
(run the scripts against fake executables), compose/Kubernetes structure, all-or-nothing
writes. Parametrized over every registered plug-in."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from engines import registry
from engines.base import ContainerSpec
from engines.config import EngineConfig
from engines.errors import CapabilityError, ExportError, UnknownEngineError
from engines.export import install as install_mod
from engines.export.bundle import docker_command, export_bundle, render_bundle
from engines.export.docker_args import parse_docker_run
from engines.export.loading import load_request
from engines.export.request import ExportRequest
from engines.facts import HardwareFacts, ModelFacts
from engines.registry import ENGINES, get_engine
from engines.sglang.plugin import PLUGIN as SGLANG
from engines.trtllm.plugin import PLUGIN as TRTLLM
from engines.vllm.flags import VALUE_FLAGS
from engines.vllm.plugin import PLUGIN as VLLM
from tests.engines.conftest import H100, LLAMA_8B, QWEN3_8B, QWEN3_MOE

KINDS = sorted(ENGINES)
H100X2 = HardwareFacts(gpu_name="H100 SXM", compute_capability=(9, 0),
                       native_dtypes=frozenset({"bf16", "fp16", "fp8", "int8"}), gpu_count=2,
                       memory_per_gpu_gib=80)
LLAMA = ModelFacts(num_attention_heads=32, num_kv_heads=8, num_layers=32,
                   max_context_tokens=131072, weights_dtype="bf16")
BUNDLE = {"launch.sh", "launch-docker.sh", "docker-compose.yaml", "kubernetes.yaml",
          "bench.sh", "REPORT.md"}


def _hostile(tmp_path: Path) -> str:
    return f"m'; touch {tmp_path}/pwned; echo \"$(id)` touch {tmp_path}/pwned2` $HOME"


def _config(kind: str, **overrides: object) -> EngineConfig:
    fields = {"engine": kind, "model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 2,
              "max_num_seqs": 64, "prefix_caching": True, **overrides}
    return EngineConfig.model_validate(fields)


def _request(kind: str, **fields: object) -> ExportRequest:
    config = fields.pop("config", None) or _config(kind)
    return ExportRequest.model_validate({"config": config, **fields})


def _predicted(**fields: object) -> dict:
    """Predicted serving figures as ExportRequest JSON (seconds): p95 TTFT 182.5 ms and
    5,400 output tokens/s, other latencies without values."""
    empty = {"count": 0}
    return {"ttft_s": {"count": 10, "p95": 0.1825}, "tpot_s": empty, "itl_s": empty,
            "e2e_s": empty, "output_throughput_tok_s": 5400.0, "total_throughput_tok_s": 6000.0,
            "request_throughput_rps": 2.0, **fields}


def _export(tmp_path: Path, request: ExportRequest) -> Path:
    out = tmp_path / "bundle"
    export_bundle(request, out)
    return out


def _fake_bin(tmp_path: Path, *names: str) -> Path:
    """Executables that record their argv (without argv[0]) as JSON in $ARGV_OUT."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        fake = bin_dir / name
        fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                        "open(os.environ['ARGV_OUT'], 'w').write(json.dumps(sys.argv[1:]))\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _run_script(script: Path, bin_dir: Path, tmp_path: Path, *args: str) -> list[str]:
    argv_out = tmp_path / "argv.json"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "ARGV_OUT": str(argv_out), "HF_HOME": str(tmp_path / "hf home")}
    env.pop("ENDPOINT", None)
    done = subprocess.run(["bash", str(script), *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(argv_out.read_text())


def _unescape(values: list[str]) -> list[str]:
    for value in values:  # every $ is doubled for compose/Kubernetes interpolation
        assert "$" not in value.replace("$$", "")
    return [value.replace("$$", "$") for value in values]


def _container_args(request: ExportRequest) -> list[str]:
    """What follows the image in the plug-in's docker command."""
    argv = docker_command(request, bundle_dir="/bundle", hf_cache_dir="/cache")
    return argv[argv.index(get_engine(request.config.engine).docker_image(None)) + 1:]


# -- files and content -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bundle_has_every_file_and_the_engine_config(tmp_path: Path, kind: str) -> None:
    request = _request(kind)
    out = tmp_path / "bundle"
    written = export_bundle(request, out)
    name, text = get_engine(kind).config_file(request.config)
    assert written[0] == out / name
    assert {p.name for p in written} == BUNDLE | {name}
    assert {p.name for p in out.iterdir()} == BUNDLE | {name}
    assert (out / name).read_text() == text
    for script in ("launch.sh", "launch-docker.sh", "bench.sh"):
        assert os.access(out / script, os.X_OK)
        assert subprocess.run(["bash", "-n", str(out / script)], check=False).returncode == 0
    assert not [p for p in tmp_path.iterdir() if p.name != "bundle"]  # no staging left


def test_vllm_config_file_holds_the_knobs(tmp_path: Path) -> None:
    out = _export(tmp_path, _request("vllm"))
    data = yaml.safe_load((out / "vllm-config.yaml").read_text())
    assert data["tensor-parallel-size"] == 2 and data["max-num-seqs"] == 64
    assert data["enable-prefix-caching"] is True


@pytest.mark.parametrize("kind", KINDS)
def test_scripts_pass_exact_argv_even_for_a_hostile_model(tmp_path: Path, kind: str) -> None:
    request = _request(kind, config=_config(kind, model=_hostile(tmp_path)))
    plugin = get_engine(kind)
    out = _export(tmp_path, request)
    config_name = plugin.config_file(request.config)[0]
    local = plugin.serve_argv_with_config_file(request.config,
                                               str(out.resolve() / config_name))
    docker = docker_command(request, bundle_dir=str(out.resolve()),
                            hf_cache_dir=str(tmp_path / "hf home"))
    bin_dir = _fake_bin(tmp_path, local[0], "docker")
    assert _run_script(out / "launch.sh", bin_dir, tmp_path) == local[1:]
    assert _run_script(out / "launch-docker.sh", bin_dir, tmp_path) == docker[1:]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_bench_replays_the_requested_trace(tmp_path: Path) -> None:
    trace = str(tmp_path / "my trace's $(touch pwned).jsonl")
    out = _export(tmp_path, _request("vllm", profile=trace, host_port=8123))
    bin_dir = _fake_bin(tmp_path, "python")
    argv = _run_script(out / "bench.sh", bin_dir, tmp_path)
    # the trace by its name beside the script: the path it had where the bundle was made
    # does not exist on the GPU host
    assert argv == ["-m", "app", "bench", "--endpoint", "http://localhost:8123",
                    "--workload", "trace", "--trace",
                    str(out.resolve() / "my trace's $(touch pwned).jsonl"), "--json"]
    assert str(tmp_path) not in (out / "bench.sh").read_text().replace(str(out), "")
    assert "TRACE defaults to `my trace's $(touch pwned).jsonl` next to the script" in (
        out / "REPORT.md").read_text()
    assert _run_script(out / "bench.sh", bin_dir, tmp_path, "other.csv")[8] == "other.csv"
    assert not (tmp_path / "pwned").exists()


def test_bench_without_a_trace_asks_for_one(tmp_path: Path) -> None:
    out = _export(tmp_path, _request("vllm"))
    done = subprocess.run(["bash", str(out / "bench.sh")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0 and "TRACE_FILE" in done.stderr


# -- compose and Kubernetes --------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_compose_structure(tmp_path: Path, kind: str) -> None:
    request = _request(kind, config=_config(kind, model=_hostile(tmp_path)))
    out = _export(tmp_path, request)
    doc = yaml.safe_load((out / "docker-compose.yaml").read_text())
    assert set(doc) <= {"services", "volumes"}
    (name, service), = doc["services"].items()
    assert name == kind
    assert service["image"] == get_engine(kind).docker_image(None)
    assert _unescape(service["command"]) == _container_args(request)
    assert service["ports"] == [f"{request.config.port}:{request.config.port}"]
    assert service.get("ipc") == "host" or "shm_size" in service
    device, = service["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}
    for volume in service["volumes"]:  # the user's HF cache, or a file of the bundle
        source, _, target = volume.partition(":")
        assert source == "${HOME}/.cache/huggingface" or (
            source.startswith("./") and (out / source).is_file()), source
        assert target.startswith("/")
    health = get_engine(kind).readiness(request.config).health_path
    assert service["healthcheck"]["test"][0] == "CMD"
    assert f"localhost:{request.config.port}{health}'" in service["healthcheck"]["test"][-1]


def test_compose_cache_path_or_named_volume(tmp_path: Path) -> None:
    files = render_bundle(_request("vllm", model_cache_dir="/data/hf $cache"))
    doc = yaml.safe_load(files["docker-compose.yaml"])
    assert doc["services"]["vllm"]["volumes"] == ["/data/hf $$cache:/root/.cache/huggingface"]
    assert "volumes" not in doc
    assert "-v '/data/hf $cache:/root/.cache/huggingface'" in files["launch-docker.sh"]
    hostpath = [v for v in next(yaml.safe_load_all(files["kubernetes.yaml"]))["spec"][
        "template"]["spec"]["volumes"] if "hostPath" in v]
    assert hostpath[0]["hostPath"]["path"] == "/data/hf $cache"
    doc = yaml.safe_load(render_bundle(_request("vllm", model_cache_dir="my-cache"))[
        "docker-compose.yaml"])
    assert doc["services"]["vllm"]["volumes"] == ["my-cache:/root/.cache/huggingface"]
    assert doc["volumes"] == {"my-cache": {}}  # a named volume must be declared


@pytest.mark.parametrize("kind", KINDS)
def test_kubernetes_structure(tmp_path: Path, kind: str) -> None:
    request = _request(kind, config=_config(kind, model=_hostile(tmp_path), pp=2, port=9001),
                       gpu_count=4)
    out = _export(tmp_path, request)
    docs = {d["kind"]: d for d in yaml.safe_load_all((out / "kubernetes.yaml").read_text())}
    assert set(docs) <= {"Deployment", "Service", "ConfigMap", "PersistentVolumeClaim"}
    deployment, service = docs["Deployment"], docs["Service"]
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    template = deployment["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    container, = template["spec"]["containers"]
    assert _unescape(container["args"]) == _container_args(request)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    port = container["ports"][0]["containerPort"]
    assert port == 9001 == service["spec"]["ports"][0]["targetPort"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"path": get_engine(kind).readiness(request.config).health_path,
                     "port": port}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    shm, = (m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"] == {"medium": "Memory"}
    # the model cache outlives the pod: weights download once, not at every start
    cache, = (m for m in container["volumeMounts"]
              if m["mountPath"] == "/root/.cache/huggingface")
    claim = docs["PersistentVolumeClaim"]
    assert volumes[cache["name"]] == {"name": cache["name"], "persistentVolumeClaim": {
        "claimName": claim["metadata"]["name"]}}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"].endswith("Gi")
    assert not any("emptyDir" in v for n, v in volumes.items() if n != shm["name"])
    assert {m["name"] for m in container["volumeMounts"]} <= set(volumes)
    config_name, config_text = get_engine(kind).config_file(request.config)
    for mount in container["volumeMounts"]:  # bundle files come from the ConfigMap
        source = volumes[mount["name"]]
        if "configMap" in source:
            assert source["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
            assert docs["ConfigMap"]["data"][mount["subPath"]] == config_text
            assert mount["subPath"] == config_name


class _TrtStyleDocker:
    """The vLLM plug-in, but with a container in another engine's style."""

    def __init__(self, **extra: object) -> None:
        self._extra = extra

    def __getattr__(self, name: str) -> object:
        return getattr(VLLM, name)

    def container_spec(self, config: EngineConfig, **kwargs: object) -> ContainerSpec:
        spec = VLLM.container_spec(config, **kwargs)
        return spec.model_copy(update={"env_passthrough": [*spec.env_passthrough, "A_B"],
                                       **self._extra})


def test_other_docker_options_reach_both_manifests(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(registry.ENGINES, "vllm", _TrtStyleDocker(
        shm_size="16g", ulimits={"memlock": -1, "stack": 67108864}))
    files = render_bundle(_request("vllm"))
    service = yaml.safe_load(files["docker-compose.yaml"])["services"]["vllm"]
    assert service["shm_size"] == "16g"
    assert service["ulimits"] == {"memlock": {"soft": -1, "hard": -1},
                                  "stack": {"soft": 67108864, "hard": 67108864}}
    assert "A_B" in service["environment"]  # passed through by name
    container = next(yaml.safe_load_all(files["kubernetes.yaml"]))["spec"]["template"]["spec"][
        "containers"][0]
    assert {"name": "A_B", "valueFrom": {"secretKeyRef": {
        "name": "servefit-env", "key": "A_B", "optional": True}}} in container["env"]


def test_docker_options_a_command_may_carry_are_translated_or_refused() -> None:
    """The manifests read a `docker run` command: an entrypoint and a set variable are
    translated; an option with no translation (--privileged) is refused, never dropped."""
    base = ["docker", "run", "--rm", "--name", "n", "-p", "8000:8000"]
    parsed = parse_docker_run([*base, "--entrypoint", "python3", "-e", "A_B=x$y", "img", "m"],
                              "img", "vllm")
    assert parsed.entrypoint == ["python3"] and ("A_B", "x$y") in parsed.env
    assert parsed.command == ["m"]
    with pytest.raises(ExportError, match="--privileged"):
        parse_docker_run([*base, "--privileged", "img"], "img", "vllm")


# -- the weight quantization a bundle deploys --------------------------------------------------
# An FP8 pick of Llama-3.1-8B on H100s, with the facts the recommender exports (LLAMA_8B knows
# the catalog's FP8 checkpoint). Each bundle is read back through the engine's own parser.

BF16_ID, FP8_ID = "meta-llama/Llama-3.1-8B-Instruct", "nvidia/Llama-3.1-8B-Instruct-FP8"


def _fp8_pick(tmp_path: Path, kind: str, model: str = BF16_ID,
              facts: ModelFacts = LLAMA_8B) -> ExportRequest:
    return _request(kind, config=_config(kind, model=model, weight_quantization="fp8"),
                    gpu="H100-SXM", hardware=H100X2, model_facts=facts)


def _pairs(argv: list[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(argv))


def test_vllm_fp8_pick_quantizes_on_load(tmp_path: Path) -> None:
    request = _fp8_pick(tmp_path, "vllm")
    out = _export(tmp_path, request)
    text = (out / "vllm-config.yaml").read_text()
    assert yaml.safe_load(text)["quantization"] == "fp8"
    assert "quantization" in VALUE_FLAGS  # a valued flag of vLLM's own parser
    launched = _run_script(out / "launch.sh", _fake_bin(tmp_path, "vllm"), tmp_path)
    assert launched == ["serve", BF16_ID, "--config", str(out.resolve() / "vllm-config.yaml")]
    assert VLLM.config_from_file(BF16_ID, text, ["vllm", *launched]).weight_quantization == "fp8"
    assert ("--quantization", "fp8") in _pairs(_container_args(request))  # docker, compose, k8s
    assert BF16_ID in _container_args(request)


def test_sglang_fp8_pick_quantizes_on_load(tmp_path: Path) -> None:
    request = _fp8_pick(tmp_path, "sglang")
    out = _export(tmp_path, request)
    text = (out / "sglang-config.yaml").read_text()
    assert yaml.safe_load(text)["quantization"] == "fp8"
    launched = _run_script(out / "launch.sh", _fake_bin(tmp_path, "python3"), tmp_path)
    assert launched == ["-m", "sglang.launch_server", "--model-path", BF16_ID, "--config",
                        str(out.resolve() / "sglang-config.yaml")]
    back = SGLANG.config_from_file(BF16_ID, text, ["python3", *launched])
    assert back.weight_quantization == "fp8"


def test_trtllm_fp8_pick_serves_the_fp8_checkpoint(tmp_path: Path) -> None:
    request = _fp8_pick(tmp_path, "trtllm")
    out = _export(tmp_path, request)
    launched = _run_script(out / "launch.sh", _fake_bin(tmp_path, "trtllm-serve"), tmp_path)
    assert launched[0] == FP8_ID
    text = (out / "trtllm-extra-options.yaml").read_text()
    back = TRTLLM.config_from_file(FP8_ID, text, ["trtllm-serve", *launched])
    # The file and argv hold no quantization: the checkpoint served declares it (FP8).
    assert back == request.config.model_copy(update={"model": FP8_ID,
                                                     "weight_quantization": None})
    assert FP8_ID in _container_args(request)
    for name in ("launch.sh", "launch-docker.sh", "docker-compose.yaml", "kubernetes.yaml"):
        body = (out / name).read_text()
        assert FP8_ID in body and BF16_ID not in body, name
    report = (out / "REPORT.md").read_text()
    assert "`weight_quantization=fp8`" in report
    assert (f"- Model: `{FP8_ID}` (the pre-quantized fp8 checkpoint of `{BF16_ID}`: trtllm does "
            f"not quantize it on load; clients request `{FP8_ID}`)") in report.splitlines()


def test_trtllm_fp8_pick_without_a_known_checkpoint_is_refused(tmp_path: Path) -> None:
    qwen = ModelFacts(num_attention_heads=32, num_kv_heads=8, num_layers=36,
                      max_context_tokens=40960, weights_dtype="bf16")
    request = _fp8_pick(tmp_path, "trtllm", model="Qwen/Qwen3-8B", facts=qwen)
    with pytest.raises(CapabilityError) as info:
        export_bundle(request, tmp_path / "bundle")
    assert str(info.value) == (
        "weight_quantization=fp8: TensorRT-LLM cannot quantize the bf16 checkpoint "
        "Qwen/Qwen3-8B on load and no pre-quantized fp8 checkpoint of it is known; name one as "
        "the model, leave weight_quantization unset, or serve it with vLLM or SGLang (they "
        "quantize FP8 on load)")
    assert not (tmp_path / "bundle").exists()


# An AWQ pick: vLLM and SGLang read AWQ only from an AWQ checkpoint, so the bundle serves the
# catalog's one (LLAMA_8B knows it), or export refuses when the model has none.

AWQ_ID = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
LAUNCHER = {"vllm": "vllm", "sglang": "python3"}
SERVE_ARGV = {
    "vllm": lambda model, path: ["serve", model, "--config", path],
    "sglang": lambda model, path: ["-m", "sglang.launch_server", "--model-path", model,
                                   "--config", path],
}


def _awq_pick(kind: str, model: str = BF16_ID, facts: ModelFacts = LLAMA_8B) -> ExportRequest:
    return _request(kind, config=_config(kind, model=model, weight_quantization="awq"),
                    gpu="H100-SXM", hardware=H100X2, model_facts=facts)


@pytest.mark.parametrize(("kind", "plugin"), [("vllm", VLLM), ("sglang", SGLANG)])
def test_awq_pick_serves_the_awq_checkpoint(tmp_path: Path, kind: str, plugin) -> None:
    request = _awq_pick(kind)
    out = _export(tmp_path, request)
    name = f"{kind}-config.yaml"
    launched = _run_script(out / "launch.sh", _fake_bin(tmp_path, LAUNCHER[kind]), tmp_path)
    assert launched == SERVE_ARGV[kind](AWQ_ID, str(out.resolve() / name))
    text = (out / name).read_text()
    back = plugin.config_from_file(AWQ_ID, text, [LAUNCHER[kind], *launched])
    # The quantization predicted, now on the checkpoint that is in it.
    assert (back.model, back.weight_quantization, back.tp) == (AWQ_ID, "awq", 2)
    assert ("--quantization", "awq_marlin") in _pairs(_container_args(request))
    for body in ("launch.sh", "launch-docker.sh", "docker-compose.yaml", "kubernetes.yaml"):
        assert AWQ_ID in (out / body).read_text() and BF16_ID not in (out / body).read_text()
    assert BF16_ID not in text
    report = (out / "REPORT.md").read_text()
    assert (f"- Model: `{AWQ_ID}` (the pre-quantized awq checkpoint of `{BF16_ID}`: {kind} does "
            f"not quantize it on load; clients request `{AWQ_ID}`)") in report.splitlines()


@pytest.mark.parametrize(("kind", "engine"), [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_awq_pick_without_a_known_checkpoint_is_refused(tmp_path: Path, kind: str,
                                                        engine: str) -> None:
    request = _awq_pick(kind, model="Qwen/Qwen3-8B", facts=QWEN3_8B)
    with pytest.raises(CapabilityError) as info:
        export_bundle(request, tmp_path / "bundle")
    assert str(info.value) == (
        f"weight_quantization=awq: {engine} cannot quantize the bf16 checkpoint Qwen/Qwen3-8B "
        "on load and no pre-quantized awq checkpoint of it is known; name one as the model, "
        f"leave weight_quantization unset, or use fp8 ({engine} quantizes it on load)")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "bundle").exists()


# -- report and checks -------------------------------------------------------------------------


def test_report_with_facts_predictions_and_reasons(tmp_path: Path) -> None:
    request = _request("vllm", gpu="H100-SXM", hardware=H100X2, model_facts=LLAMA,
                       predicted=_predicted(),
                       reasons=["p90 prompt of 2 k tokens fits one chunk"],
                       warnings=["outside the calibrated range"])
    report = (_export(tmp_path, request) / "REPORT.md").read_text()
    assert "H100-SXM × 2" in report and "`tp=2`" in report and "`max_num_seqs=64`" in report
    assert "Passed" in report and "- ttft_p95_ms: 182.5" in report
    assert "- p90 prompt of 2 k tokens fits one chunk" in report
    assert "outside the calibrated range" in report
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct --config" in report
    for name in BUNDLE | {"vllm-config.yaml"}:
        assert f"`{name}`" in report


def test_report_gives_a_figure_with_its_interval(tmp_path: Path) -> None:
    interval = {"metric": "ttft", "low": 0.5, "high": 2.0, "basis": "cell", "rows": 9,
                "pooled": False}
    request = _request("vllm", predicted=_predicted(intervals={"ttft": interval}))
    report = (_export(tmp_path, request) / "REPORT.md").read_text()
    assert "- ttft_p95_ms: 182.5 (91.25-365)" in report
    assert "- output_throughput_tok_s: 5400\n" in report  # no interval given: the value alone
    assert "ttft_p50_ms" not in report  # a latency without a value is left out


def test_report_leads_with_why_a_config_is_not_deployable(tmp_path: Path) -> None:
    why = "670 of 3,000 requests can never be served; 2x H100-SXM serves them"
    report = (_export(tmp_path, _request("vllm", not_deployable=why)) / "REPORT.md"
              ).read_text().splitlines()
    assert report[2] == f"> **Not deployable as it is.** {why}"
    plain = (_export(tmp_path / "b", _request("vllm")) / "REPORT.md").read_text()
    assert "Not deployable" not in plain
    with pytest.raises(ValidationError):
        _request("vllm", not_deployable="two\nlines")


def test_report_without_context_says_so(tmp_path: Path) -> None:
    report = (_export(tmp_path, _request("vllm")) / "REPORT.md").read_text()
    assert "Skipped: the request gave no hardware/model facts." in report
    assert report.count("None were given in the request.") == 2


@pytest.mark.parametrize(("fields", "line"), [
    ({"predicted": _predicted(band={"cell": "vllm/hopper/dense/low_batch",
                                    "median_ape": 0.4755, "rows": 4}),
      "calibration_cell": "vllm/hopper/dense/low_batch"},
     "Error band: ±48 % (median error on sources left out of the fit) for cell "
     "`vllm/hopper/dense/low_batch`, covered by 4 held-out measurements."),
    ({"calibration_cell": "vllm/hopper/moe/fixed_concurrency"},
     "Uncalibrated: no published measurement covers cell `vllm/hopper/moe/fixed_concurrency`; "
     "the figures are the model's alone (no error band)."),
    ({}, "Uncalibrated: no error band was given; how far these figures can be trusted is "
     "unknown."),
])
def test_report_states_the_predictions_band_or_that_none_covers_them(
        tmp_path: Path, fields: dict, line: str) -> None:
    request = _request("vllm", **{"predicted": _predicted(), **fields})
    report = (_export(tmp_path, request) / "REPORT.md").read_text()
    assert line in report.splitlines()


def test_report_code_spans_survive_backticks(tmp_path: Path) -> None:
    report = render_bundle(_request("vllm", config=_config("vllm", model="a``b")))["REPORT.md"]
    assert "```a``b```" in report


def test_capability_check_refuses_and_writes_nothing(tmp_path: Path) -> None:
    request = _request("vllm", config=_config("vllm", tp=2, kv_cache_dtype="fp8"),
                       hardware=H100X2.model_copy(update={"native_dtypes": frozenset({"bf16"})}),
                       model_facts=LLAMA)
    with pytest.raises(CapabilityError, match="FP8"):
        export_bundle(request, tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


def test_unregistered_engine_is_one_clear_error(tmp_path, monkeypatch) -> None:
    # A registry without vLLM, swapped in whole: deleting the key and letting monkeypatch put it
    # back would move vLLM to the end of the dict, and the search's grid follows that order.
    monkeypatch.setattr(registry, "ENGINES", {k: v for k, v in registry.ENGINES.items()
                                             if k != "vllm"})
    with pytest.raises(UnknownEngineError, match="unknown engine 'vllm'"):
        export_bundle(_request("vllm"), tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


# -- expert and attention data parallelism ------------------------------------------------------

_MOE_LAYOUTS = [
    pytest.param(kind, fields, line, id=f"{kind}-{name}")
    for kind in KINDS
    for name, fields, line in [
        ("TEP", {"tp": 8, "ep": 8}, "tp=8, pp=1, dp=1, ep=8 (TEP) → 8 GPU(s) per replica"),
        ("DEP", {"dp": 8, "ep": 8}, "tp=1, pp=1, dp=8, ep=8 (DEP) → 8 GPU(s) per replica"),
        ("DEP-pp2", {"dp": 4, "ep": 4, "pp": 2},
         "tp=1, pp=2, dp=4, ep=4 (DEP) → 8 GPU(s) per replica"),
    ]
] + [
    pytest.param(kind, {"tp": 2, "dp": 4, "ep": 8},
                 "tp=2, pp=1, dp=4, ep=8 (DEP) → 8 GPU(s) per replica", id=f"{kind}-DEP-tp2")
    for kind in ("vllm", "sglang")  # TensorRT-LLM's attention DP ranks have TP 1
]


@pytest.mark.parametrize(("kind", "fields", "line"), _MOE_LAYOUTS)
def test_moe_layouts_ask_for_every_gpu_of_the_instance(tmp_path: Path, kind: str,
                                                        fields: dict, line: str) -> None:
    config = EngineConfig.model_validate(
        {"engine": kind, "model": "Qwen/Qwen3-235B-A22B", **fields})
    request = _request(kind, config=config, hardware=H100, model_facts=QWEN3_MOE)
    out = _export(tmp_path, request)
    device, = yaml.safe_load((out / "docker-compose.yaml").read_text())["services"][kind][
        "deploy"]["resources"]["reservations"]["devices"]
    assert device["count"] == 8
    docs = {d["kind"]: d for d in yaml.safe_load_all((out / "kubernetes.yaml").read_text())}
    container, = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    bin_dir = _fake_bin(tmp_path, "docker")
    docker = _run_script(out / "launch-docker.sh", bin_dir, tmp_path)
    assert docker[docker.index("--gpus") + 1] == "8"
    report = (out / "REPORT.md").read_text().splitlines()
    assert f"- GPU: H100 SXM × 8; {line}" in report
    assert "Passed: " + kind + " accepts this config on 8 × H100 SXM." in report


@pytest.mark.parametrize("kind", KINDS)
def test_expert_parallel_export_of_a_dense_model_is_refused(tmp_path: Path, kind: str) -> None:
    request = _request(kind, config=_config(kind, tp=2, ep=2), hardware=H100X2,
                       model_facts=LLAMA)
    with pytest.raises(CapabilityError, match=r"^TEP \(ep=2, dp=1\) .* the model is dense"):
        export_bundle(request, tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_tp_config_names_no_expert_layout(tmp_path: Path) -> None:
    report = (_export(tmp_path, _request("vllm")) / "REPORT.md").read_text().splitlines()
    assert "- GPU: GPU not given; tp=2, pp=1 → 2 GPU(s) per replica" in report


# -- the request -------------------------------------------------------------------------------


def test_bare_config_and_wrapped_request_load_alike(tmp_path: Path) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"engine": "vllm", "model": "org/m", "tp": 2}))
    wrapped = tmp_path / "rec.json"
    wrapped.write_text(json.dumps({"config": {"engine": "vllm", "model": "org/m", "tp": 2},
                                   "gpu": "H100-SXM", "gpu_count": 2, "reasons": ["r"]}))
    assert load_request(bare).config == load_request(wrapped).config
    assert load_request(wrapped).gpu_count == 2 and load_request(bare).gpu is None


def test_a_saved_recommendation_is_read_by_the_reader_given(tmp_path: Path) -> None:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"candidates": [], "pick_index": 0}))
    with pytest.raises(ExportError, match=r"rec\.json: a saved Recommendation: give it to"):
        load_request(path)  # engines/ does not know the recommender's record
    request = _request("vllm")
    assert load_request(path, recommendation=lambda data: request) is request


@pytest.mark.parametrize(("content", "needle"), [
    ("{", "not JSON: Expecting property name"),
    ("[1]", "expected a JSON object"),
    ('{"engine": "vllm"}', "config.model: Field required"),
    ('{"engine": "tgi", "model": "m"}', "config.engine: Input should be"),
    ('{"config": {"engine": "vllm", "model": "m"}, "colour": 1}', "colour: Extra inputs"),
    ('{"config": {"engine": "vllm", "model": "m", "tp": 4}, "gpu_count": 2}', "tp×pp×dp = 4"),
    ('{"config": {"engine": "sglang", "model": "m", "dp": 4, "ep": 4}, "gpu_count": 2}',
     "tp×pp×dp = 4 GPUs, but gpu_count is 2"),
    ('{"config": {"engine": "vllm", "model": "m", "disaggregation": {"prefill_instances": 1, '
     '"decode_instances": 1}}}', "disaggregated"),
    ('{"config": {"engine": "vllm", "model": "m"}, "reasons": ["a\\nb"]}', "one line"),
    ('{"config": {"engine": "vllm", "model": "m"}, "model_cache_dir": "a:b"}', "absolute"),
    # the host's root or system folders, however written, would be mounted read-write
    *[(f'{{"config": {{"engine": "vllm", "model": "m"}}, "model_cache_dir": "{d}"}}',
       "is a system folder") for d in ("/", "//", "/etc", "/usr/lib", "/data/..", "/home")],
    ('{"config": {"engine": "vllm", "model": "m"}, "kv_headroom_fraction": NaN}',
     "figures must be finite"),
])
def test_bad_requests_name_file_and_field(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "rec.json"
    path.write_text(content)
    with pytest.raises(ExportError, match=r"rec\.json") as info:
        load_request(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_facts_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="both hardware and model_facts"):
        _request("vllm", hardware=H100X2)


# -- all or nothing ----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("boom")])
def test_a_failed_write_leaves_no_bundle(tmp_path, monkeypatch, error) -> None:
    real = install_mod._write_file
    calls: list[Path] = []

    def flaky(path: Path, text: str) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise error
        real(path, text)

    monkeypatch.setattr(install_mod, "_write_file", flaky)
    with pytest.raises((ExportError, RuntimeError)):
        export_bundle(_request("vllm"), tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_install_restores_the_previous_bundle(tmp_path, monkeypatch) -> None:
    out = _export(tmp_path, _request("vllm"))
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_text() for p in out.iterdir()}
    real = os.replace
    calls = {"n": 0}

    def flaky(src: object, dst: object) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(5, "I/O error")
        real(src, dst)

    monkeypatch.setattr(install_mod.os, "replace", flaky)
    with pytest.raises(ExportError, match="I/O error"):
        export_bundle(_request("vllm", config=_config("vllm", max_num_seqs=8)), out,
                      replace=True)
    monkeypatch.undo()
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_reexport_refuses_existing_bundle_files_unless_told_to_replace(tmp_path: Path) -> None:
    out = _export(tmp_path, _request("vllm"))
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ExportError, match=r"already exist.*--force"):
        export_bundle(_request("vllm", config=_config("vllm", max_num_seqs=8)), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_reexport_replaces_the_bundle_and_keeps_other_files(tmp_path: Path) -> None:
    out = _export(tmp_path, _request("vllm"))
    (out / "notes.txt").write_text("mine")
    export_bundle(_request("vllm", config=_config("vllm", max_num_seqs=8)), out, replace=True)
    assert "max-num-seqs: 8" in (out / "vllm-config.yaml").read_text()
    assert (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ExportError, match="not a folder"):
        export_bundle(_request("vllm"), target)


def test_a_cache_under_a_home_or_data_folder_is_mounted() -> None:
    for folder in ("/home/me/.cache/huggingface", "/root/.cache/huggingface", "/data/hf"):
        assert _request("vllm", model_cache_dir=folder).model_cache_dir == folder
