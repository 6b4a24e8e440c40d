"""Tests for recommender/model/steptime.py and the measured-kernel provider
(recommender/model/steptime_aic.py, aic_cells.py, aic_tables.py): the step-time provider
interface (registry keyed by kind, the provider as an argument, fallback) and the
measured-kernel provider.

The measured provider is checked against direct calls of aiconfigurator-core (its own
answer, computed in the test), not against the provider's own helpers.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import UsageError
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model import perf, steptime
from recommender.model.aic_cells import cell_key
from recommender.model.aic_tables import build_table, pack
from recommender.model.params import EngineParams, PerfParams, default_params, load_params
from recommender.model.perf import Batch, deployment, step_coefficients, step_seconds
from recommender.model.resolve import resolve
from recommender.sim.kernel.step_time import table_seconds

PARAMS = EngineParams(compute_efficiency=0.5, bandwidth_efficiency=0.8, step_overhead_s=0.002,
                      per_seq_overhead_s=1e-5)
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def _config(engine: str = "trtllm", **kw) -> EngineConfig:
    kw = {"weight_quantization": "fp8", "kv_cache_dtype": "fp8", **kw}
    return EngineConfig(engine=engine, model=LLAMA_8B, tp=1, **kw)  # type: ignore[arg-type]


def _dep(kind: str = steptime.DEFAULT_KIND, gpu: str = "H100-SXM", **kw) -> perf.Deployment:
    return deployment(_config(**kw), get_gpu(gpu), get_model(LLAMA_8B), step_time=kind)


def _step(dep: perf.Deployment, batch: Batch, params: EngineParams = PARAMS) -> float:
    """`perf.step_seconds` of `batch` on `dep` under `params`."""
    assert dep.kernels is not None
    return step_seconds(step_coefficients(dep, params), dep.kernels.table(), batch)


def _kernel_s(dep: perf.Deployment, batch: Batch, params: EngineParams = PARAMS) -> float:
    """The provider's kernel time of `batch`: the step with the engine's per-step and
    per-position overheads at zero (no draft without speculation)."""
    return _step(dep, batch, params.model_copy(
        update={"step_overhead_s": 0.0, "per_seq_overhead_s": 0.0}))


class ConstantKernels:
    """A real plug-in provider (not a stand-in for one): every forward takes 3 ms (a table
    in the layout the step formula reads, flat up to a million tokens)."""

    kind = "constant"

    def table(self) -> np.ndarray:
        nodes = np.array([1.0, 1e6])
        return pack((nodes, np.full(2, 0.003)), (nodes, np.zeros(2)), nodes, nodes,
                    np.zeros((2, 2)))


def constant_kernels(cell: steptime.StepCell) -> ConstantKernels | None:
    return ConstantKernels() if cell.gpu.vendor == "nvidia" else None


def test_default_provider_is_the_measured_tables_with_the_roofline_as_fallback():
    assert steptime.DEFAULT_KIND == "measured" and steptime.FALLBACK_KIND == "roofline"
    dep = _dep()
    assert dep.kernels is not None and dep.kernels.kind == "measured"
    assert _dep(gpu="MI300X", engine="vllm").kernels is perf.ROOFLINE


def test_roofline_step_is_kernel_plus_overheads():
    # Llama-3.1-8B FP8 on H100-SXM, one decode at context 1: ~8.03 GB of weights (FP8 body,
    # bf16 embeddings) over 3.35 TB/s × 0.8 dominates the kernel; + 2 ms + 1 sampled × 10 µs.
    dep = _dep("roofline")
    assert dep.kernels is perf.ROOFLINE and dep.kernels.table().shape == (0,)
    batch = Batch(prefill_tokens=0, decode_seqs=1, decode_context=1)
    kernel = _kernel_s(dep, batch)
    assert _step(dep, batch) == pytest.approx(kernel + 0.002 + 1e-5, rel=1e-12)
    body = 8.03e9 - 2 * 128256 * 4096  # untied embeddings and lm_head stay bf16
    weights = body + 2 * 128256 * 4096 * 2
    assert kernel == pytest.approx(weights / (3.35e12 * 0.8), rel=0.03)


def test_registry_is_keyed_by_kind_and_a_plugin_replaces_the_kernel_only(monkeypatch):
    assert set(steptime.PROVIDERS) >= {"roofline", "measured"}
    monkeypatch.setitem(steptime.PROVIDERS, "constant", f"{__name__}:constant_kernels")
    dep = _dep("constant")
    assert dep.kernels is not None and dep.kernels.kind == "constant"
    batch = Batch(prefill_tokens=100, decode_seqs=4, decode_context=500, prefill_seqs=1)
    # 3 ms + 2 ms step overhead + 5 sampled positions × 10 µs
    assert _step(dep, batch) == pytest.approx(0.003 + 0.002 + 5e-5, rel=1e-12)
    # The provider is an argument, not an ambient choice: the parameters name it (the one
    # they were fitted beside), resolve prices with it, and nothing else changes.
    res = resolve(_config(), get_gpu("H100-SXM"), get_model(LLAMA_8B),
                  PerfParams(engines={"trtllm": PARAMS}, step_time="constant"))
    assert res.step_time == "constant" and res.step.kernels.kind == "constant"
    assert res.step_seconds(batch) == pytest.approx(0.003 + 0.002 + 5e-5, rel=1e-12)
    assert _dep().kernels.kind == steptime.DEFAULT_KIND


@pytest.mark.parametrize("call", [
    lambda: steptime.check_kind("nope"),
    lambda: _dep("nope"),
    lambda: default_params("nope"),
    lambda: load_params(step_time="nope"),
])
def test_unknown_kind_is_a_usage_error(call):
    with pytest.raises(UsageError, match="step-time provider"):
        call()


def test_a_cell_the_provider_does_not_cover_falls_back_to_the_roofline(monkeypatch):
    monkeypatch.setitem(steptime.PROVIDERS, "constant", f"{__name__}:constant_kernels")
    amd = deployment(EngineConfig(engine="vllm", model=LLAMA_8B, tp=1), get_gpu("MI300X"),
                     get_model(LLAMA_8B), step_time="constant")
    assert amd.kernels is perf.ROOFLINE


# ---------------------------------------------------------------------------------------------
# The measured provider (aiconfigurator-core)

aic = pytest.importorskip("aiconfigurator_core.sdk")


@pytest.fixture(scope="module")
def measured():
    dep = _dep("measured")
    assert dep.kernels is not None and dep.kernels.kind == "measured"
    direct = aic.EngineHandle.compile(
        "meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "trtllm", backend_version="current",
        tp_size=1, gemm_quant_mode="fp8", kvcache_quant_mode="fp8", fmha_quant_mode="bfloat16")
    return dep, direct


def test_measured_decode_matches_aiconfigurator(measured):
    dep, direct = measured
    for seqs, context, rel in ((8, 2048, 0.01), (64, 4096, 0.01), (48, 3000, 0.03)):
        want_ms = direct.decode_step_latency(seqs, context - 1, 2)  # s = isl + osl // 2
        got = _kernel_s(dep, Batch(0, seqs, context))
        assert got * 1e3 == pytest.approx(want_ms, rel=rel), (seqs, context)


def test_measured_prefill_matches_aiconfigurator(measured):
    dep, direct = measured
    # (tokens in the step, prompt length): one whole prompt, and batches of short prompts,
    # whose attention launches aiconfigurator charges once per step, not once per prompt.
    for tokens, prompt, rel in ((1024, 1024, 0.01), (8192, 8192, 1e-9), (1500, 1500, 0.03),
                                (8192, 128, 0.03), (8192, 256, 0.03), (4096, 1024, 0.03),
                                (16384, 4096, 0.03)):
        want_ms = direct.mixed_step_breakdown(tokens, 0, prompt, 2, 0)[0]
        batch = Batch(tokens, 0, 0, prefill_context=prompt / 2, prefill_seqs=tokens / prompt)
        assert _kernel_s(dep, batch) * 1e3 == pytest.approx(want_ms, rel=rel), (tokens, prompt)


def test_prefill_kernel_scale_multiplies_the_prefill_gemms_only(measured):
    dep, direct = measured
    slow = PARAMS.model_copy(update={"prefill_kernel_scale": 2.0})
    decode = Batch(0, 64, 2000)
    assert _kernel_s(dep, decode, slow) == _kernel_s(dep, decode)
    # a pure prefill: the scale adds its shared (non-attention) ops once more, attention stays
    prefill = Batch(4096, 0, 0, prefill_context=512, prefill_seqs=4)
    shared_ms = direct.mixed_step_breakdown(4096, 0, 1024, 2, 0)[1]
    extra = _kernel_s(dep, prefill, slow) - _kernel_s(dep, prefill)
    assert extra * 1e3 == pytest.approx(shared_ms, rel=1e-9)


@pytest.mark.parametrize(("tp", "want"), [(1, 2.0), (2, 2.0 * 0.5 ** (1 / 3)),
                                         (4, 2.0 * 0.5 ** (2 / 3)), (8, 1.0), (16, 1.0)])
def test_prefill_scale_runs_from_one_gpu_to_eight_geometrically(tp, want):
    # 2.0 on one GPU, 1.0 at TP 8: each doubling of TP multiplies the scale by 0.5^(1/3).
    p = PARAMS.model_copy(update={"prefill_kernel_scale": 2.0, "prefill_kernel_scale_tp8": 1.0})
    assert p.prefill_scale(tp) == pytest.approx(want, rel=1e-12)


def test_measured_step_adds_servefit_overheads_and_ignores_efficiencies(measured):
    dep, _ = measured
    batch = Batch(0, 16, 1000)
    slow = PARAMS.model_copy(update={"compute_efficiency": 0.1, "bandwidth_efficiency": 0.1})
    # the table's own time for 16 decodes at context 1000 (no prefill)
    kernel = table_seconds(dep.kernels.table(), 0.0, 0.0, 16.0, 16.0 * 1000, 1.0)
    assert _step(dep, batch) == pytest.approx(kernel + 0.002 + 16e-5, rel=1e-12)
    assert _step(dep, batch, slow) == _step(dep, batch)


def test_simulator_reads_the_same_table(measured):
    # One request alone under the measured provider: its decode steps (one sequence at
    # context 500 + k) take what the step formula gives on the same table, summed.
    from recommender.sim.simulator import SimOptions, SimRequests, simulate

    dep, _ = measured
    params = PerfParams(engines={"trtllm": PARAMS}, step_time="measured")
    config, gpu, model = _config(), get_gpu("H100-SXM"), get_model(LLAMA_8B)
    res = resolve(config, gpu, model, params)
    assert res.step_time == "measured"
    np.testing.assert_array_equal(res.table, dep.kernels.table())
    inp, out = 500, 30
    sim = simulate(SimRequests(np.zeros(1), np.array([inp]), np.array([out])), config, gpu,
                   model, params=params, options=SimOptions(arrival="offline"))
    decodes = [_step(dep, Batch(0, 1, inp + k)) for k in range(out - 1)]
    assert sim.e2e_s[0] - sim.ttft_s[0] == pytest.approx(sum(decodes), rel=1e-9)


def test_missing_table_falls_back_to_the_roofline():
    # NVFP4 GEMMs need Blackwell: aiconfigurator has no H100 table for them.
    assert _dep("measured", weight_quantization="nvfp4", kv_cache_dtype="auto").kernels \
        is perf.ROOFLINE
    # no table for AMD GPUs, nor for a block it does not model (a model type outside the
    # Llama-style dense families that it does not bundle)
    assert _dep("measured", gpu="MI300X", engine="vllm").kernels is perf.ROOFLINE
    other = get_model("Qwen/Qwen3-14B").model_copy(update={"name": "x/y", "model_type": "gemma2"})
    dep = deployment(EngineConfig(engine="vllm", model=other.name, tp=1), get_gpu("H100-SXM"),
                     other, step_time="measured")
    assert dep.kernels is perf.ROOFLINE


# Qwen/Qwen3-14B's config.json on Hugging Face (the fields aiconfigurator reads), typed here
# from the model card, not from ServeFit's catalog.
QWEN3_14B_HF = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
    "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 17408, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_a_dense_model_it_does_not_bundle_is_built_from_its_shapes(tmp_path):
    import json

    qwen = get_model("Qwen/Qwen3-14B")
    dep = deployment(EngineConfig(engine="vllm", model=qwen.name, tp=1), get_gpu("H100-SXM"),
                     qwen, step_time="measured")
    assert dep.kernels is not None and dep.kernels.kind == "measured"
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_14B_HF))
    direct = aic.EngineHandle.compile(
        str(tmp_path), "h100_sxm", "vllm", backend_version="current", tp_size=1,
        gemm_quant_mode="bfloat16", kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16")
    for seqs, context in ((8, 2048), (64, 1024)):
        want_ms = direct.decode_step_latency(seqs, context - 1, 2)
        got = _kernel_s(dep, Batch(0, seqs, context))
        assert got * 1e3 == pytest.approx(want_ms, rel=0.02), (seqs, context)


def test_block_scaled_fp8_checkpoints_run_the_block_kernels():
    # Qwen3's official FP8 checkpoints are 128x128 block-scaled: aiconfigurator's fp8_block
    # GEMM and MoE tables, which differ from per-tensor fp8 on vLLM (~2x for the MoE).
    qwen = get_model("Qwen/Qwen3-235B-A22B")
    config = EngineConfig(engine="vllm", model=qwen.name, tp=4, weight_quantization="fp8")
    dep = deployment(config, get_gpu("H100-SXM"), qwen, step_time="measured")
    assert dep.kernels is not None and dep.kernels.kind == "measured"
    kw = {"backend_version": "current", "tp_size": 4, "moe_tp_size": 4, "moe_ep_size": 1,
          "kvcache_quant_mode": "bfloat16", "fmha_quant_mode": "bfloat16"}
    block = aic.EngineHandle.compile("Qwen/Qwen3-235B-A22B", "h100_sxm", "vllm",
                                     gemm_quant_mode="fp8_block", moe_quant_mode="fp8_block", **kw)
    tensor = aic.EngineHandle.compile("Qwen/Qwen3-235B-A22B", "h100_sxm", "vllm",
                                      gemm_quant_mode="fp8", moe_quant_mode="fp8", **kw)
    want_ms = block.decode_step_latency(256, 511, 2)
    got_ms = _kernel_s(dep, Batch(0, 256, 512)) * 1e3
    assert got_ms == pytest.approx(want_ms, rel=0.03)
    assert abs(tensor.decode_step_latency(256, 511, 2) / want_ms - 1) > 0.3


def test_fp8_weights_without_fp8_tensor_cores_run_the_bf16_tables():
    # Ampere has no FP8 tensor cores: vLLM serves an FP8 checkpoint there weight-only
    # (Marlin W8A16, bf16 math). The measured provider prices it with aiconfigurator's bf16
    # GEMMs (it measures no FP8 on A100), not the roofline fallback; memory still holds
    # 1-byte weights.
    model = get_model(LLAMA_8B)
    config = EngineConfig(engine="vllm", model=model.name, tp=1, weight_quantization="fp8")
    dep = deployment(config, get_gpu("A100-80GB"), model, step_time="measured")
    assert dep.kernels is not None and dep.kernels.kind == "measured"
    plain = deployment(config.model_copy(update={"weight_quantization": None}),
                       get_gpu("A100-80GB"), model, step_time="measured")
    assert dep.weights_bytes_per_gpu < 0.6 * plain.weights_bytes_per_gpu
    bf16 = aic.EngineHandle.compile(
        "meta-llama/Meta-Llama-3.1-8B", "a100_sxm", "vllm", backend_version="current",
        tp_size=1, gemm_quant_mode="bfloat16", kvcache_quant_mode="bfloat16",
        fmha_quant_mode="bfloat16")
    for seqs, context in ((8, 2048), (64, 1024)):
        want_ms = bf16.decode_step_latency(seqs, context - 1, 2)
        assert _kernel_s(dep, Batch(0, seqs, context)) * 1e3 == pytest.approx(
            want_ms, rel=0.03), (seqs, context)


def test_measured_tables_are_built_once_per_cell(measured):
    dep, _ = measured
    again = _dep("measured")
    assert again.kernels is dep.kernels  # the same tables: no second build (~200 calls)


def test_a_cell_the_tables_lack_is_predicted_with_the_roofline_fit():
    # MI300X has no measured tables: under the measured provider its deployment falls back to
    # the roofline, and with it to the roofline's own fit (fit.json params_by_step_time), so
    # its prediction is the roofline provider's exactly. A covered cell's is not.
    from core.load import fixed
    from tests.recommender.deploy import steady

    load = fixed(1000, 200, concurrency=16)
    amd = (EngineConfig(engine="vllm", model=LLAMA_8B, tp=1), get_gpu("MI300X"))
    h100 = (_config(), get_gpu("H100-SXM"))
    model = get_model(LLAMA_8B)
    got = {}
    for kind in ("measured", "roofline"):
        params = load_params(step_time=kind)
        assert params.step_time == kind
        got[kind] = [steady(cfg, model, gpu, load, params=params) for cfg, gpu in (amd, h100)]
    measured_params = load_params(step_time="measured")
    assert measured_params.fallback == load_params(step_time="roofline")
    assert got["measured"][0] == got["roofline"][0]
    assert got["measured"][1].tpot_s != pytest.approx(got["roofline"][1].tpot_s, rel=1e-3)


def _count_builds(tmp_path, monkeypatch) -> list[tuple[str, ...]]:
    """The keys aiconfigurator tables are built for from now on (the real builds, counted),
    with the table cache in `tmp_path`."""
    from recommender.model import steptime_aic

    builds: list[tuple[str, ...]] = []
    real_build = build_table

    def counting(key: tuple[str, ...]) -> np.ndarray:
        builds.append(key)
        return real_build(key)

    monkeypatch.setattr(steptime_aic, "build_table", counting)
    monkeypatch.setenv(steptime_aic.CACHE_ENV, str(tmp_path / "cache"))
    return builds


def test_built_tables_are_kept_on_disk_and_a_damaged_one_is_rebuilt(tmp_path, monkeypatch):
    from recommender.model import steptime_aic

    builds = _count_builds(tmp_path, monkeypatch)
    key = cell_key(steptime.StepCell(
        engine="vllm", gpu=get_gpu("H100-SXM"), model=get_model(LLAMA_8B), tp=1,
        weights_format="fp8", kv_cache_dtype="fp8"))
    assert key is not None
    first = steptime_aic._stored_or_built(key)
    [stored] = list((tmp_path / "cache" / "aic-tables").iterdir())
    again = steptime_aic._stored_or_built(key)
    assert builds == [key] and np.array_equal(first, again)  # the second came from disk
    stored.write_bytes(b"not a table")
    assert np.array_equal(steptime_aic._stored_or_built(key), first) and len(builds) == 2
    monkeypatch.setenv(steptime_aic.CACHE_ENV, "")  # "" turns the cache off
    assert steptime_aic.cache_dir() is None
    steptime_aic._stored_or_built(key)
    assert len(builds) == 3


def test_a_cell_aiconfigurator_cannot_build_is_remembered_as_uncovered(tmp_path, monkeypatch):
    # gpt-oss-20b under TRT-LLM on an L40S: aiconfigurator 0.12 has no MXFP4 MoE data for
    # Ada. The failed build cost as much as a good one and every process paid it again.
    from recommender.model import steptime_aic

    builds = _count_builds(tmp_path, monkeypatch)
    key = cell_key(steptime.StepCell(
        engine="trtllm", gpu=get_gpu("L40S"), model=get_model("openai/gpt-oss-20b"), tp=1,
        weights_format="mxfp4", kv_cache_dtype="bf16"))
    assert key is not None
    assert steptime_aic._stored_or_built(key) is None
    [kept] = list((tmp_path / "cache" / "aic-tables").iterdir())
    assert kept.suffix == ".uncovered" and "MoE data missing" in kept.read_text()
    assert steptime_aic._stored_or_built(key) is None and builds == [key]  # not rebuilt


def test_a_build_that_fails_for_the_machine_is_not_kept(tmp_path, monkeypatch):
    # A full disk or a missing package says nothing about the cell: the next run tries again.
    from recommender.model import steptime_aic

    def no_space(key: tuple[str, ...]) -> np.ndarray:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(steptime_aic, "build_table", no_space)
    monkeypatch.setenv(steptime_aic.CACHE_ENV, str(tmp_path / "cache"))
    key = ("h100_sxm", "vllm", "meta-llama/Llama-3.1-8B", "1", "1", "1", "fp8", "fp8", "fp8")
    with pytest.raises(OSError, match="No space"):
        steptime_aic._stored_or_built(key)
    assert not (tmp_path / "cache").exists()
