"""The step-time model's kernel time against kernels timed on a real GPU.

Reads a file written by `bench/gpu/step_kernels.py` (one is kept in data/measurements/: an
H200, PyTorch 2.11 cu130) and prints, for Llama-3.1-8B on that GPU, what each step-time
provider (`recommender.model.steptime`: the roofline, and NVIDIA's measured per-operation tables
when aiconfigurator-core is installed) gives for the same work, engines' per-step overheads
left out (set to 0) since the PyTorch timings have none:

- decode steps of b sequences: the 32 layers' linears + the LM head for b tokens, KV context
  0 (the weight-read-bound part of decode);
- prefill chunks of n tokens of one prompt: linears + causal attention, the LM head for the
  last token.

Run: .venv/bin/python bench/gpu/compare_step_kernels.py [FILE]

What it can and cannot say: the PyTorch timings are cuBLAS GEMMs and SDPA, eager, one kernel
at a time, not an engine's fused kernels; they bound what plain kernels reach on the silicon.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model import perf, steptime
from recommender.model.params import load_params

DEFAULT = Path(__file__).resolve().parents[2] / "data" / "measurements" / \
    "h200_llama8b_step_kernels.json"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DECODE = (1, 8, 32, 64, 128, 256)
PREFILL = (512, 2048, 8192)


def _model_s(kind: str, engine: str, quant: str, batch: perf.Batch, gpu_name: str) -> float:
    gpu, model = get_gpu(gpu_name), get_model(MODEL)
    fitted = load_params(step_time=kind)
    config = EngineConfig(engine=engine, model=model.name, weight_quantization=quant)
    dep = perf.deployment(config, gpu, model, scales=fitted.scales(gpu), step_time=kind)
    no_overhead = fitted.engines[engine].model_copy(
        update={"step_overhead_s": 0.0, "per_seq_overhead_s": 0.0})
    table = dep.kernels.table() if dep.kernels is not None else np.zeros(0)
    return perf.step_seconds(perf.step_coefficients(dep, no_overhead), table, batch)


def _rows(data: dict, kind: str, engine: str) -> list[str]:
    gpu = "H200" if "H200" in data["gpu"] else data["gpu"]
    layers = data["layers"]
    out = []
    for quant, key in (("none", "bf16"), ("fp8", "fp8")):
        linear = data["linear_per_layer_s"].get(key)
        if linear is None:
            continue
        cells = []
        for b in DECODE:
            measured = linear[str(b)] * layers + data["lm_head_s"][str(b)]
            batch = perf.Batch(prefill_tokens=0.0, decode_seqs=b, decode_context=0.0)
            cells.append(_cell(f"b={b}", _model_s(kind, engine, quant, batch, gpu), measured))
        for n in PREFILL:
            attention = data["prefill_attention_per_layer_s"][str(n)]
            measured = (linear[str(n)] + attention) * layers + data["lm_head_s"]["1"]
            batch = perf.Batch(prefill_tokens=n, decode_seqs=0.0, decode_context=0.0,
                               prefill_context=n / 2, prefill_seqs=1.0)
            cells.append(_cell(f"n={n}", _model_s(kind, engine, quant, batch, gpu), measured))
        out.append(f"{kind:<9} {engine:<7} {key:<5} " + "  ".join(cells))
    return out


def _cell(label: str, model_s: float, measured_s: float) -> str:
    gap = model_s / measured_s - 1
    return f"{label} {measured_s * 1e3:.2f}/{model_s * 1e3:.2f} ms ({gap:+.0%})"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    data = json.loads(path.read_text())
    print(f"{data['gpu']}, {data['model']}, torch {data['torch']}: measured/model kernel "
          "time (model - measured, relative); decode b sequences, prefill n tokens")
    for kind in steptime.PROVIDERS:
        for engine in ("vllm", "sglang", "trtllm"):
            for line in _rows(data, kind, engine):
                print(line)


if __name__ == "__main__":
    main()
