"""Measure a dense model's step kernels on a real GPU (PyTorch, no engine): the linear layers
(BF16, and FP8 through torch._scaled_mm where the GPU has it), decode attention over a KV
cache, and a prefill chunk's causal attention, for Llama-3.1-8B's shapes.

What it is for: checking the kernel-time part of ServeFit's step-time model (the roofline in
`recommender/model/perf.py`) against silicon. Engines add their own per-step overhead on top of
kernel time; that part is fitted from published measurements and is not measured here.

Runs on a machine with a CUDA GPU and PyTorch; writes one JSON file:

    python bench/gpu/step_kernels.py --out step_kernels.json

Each figure is the median of timed repetitions (CUDA events) after warm-up, in seconds, for
ONE layer (multiply by the layer count) or for the LM head.
"""

from __future__ import annotations

import argparse
import json
import statistics

# Llama-3.1-8B (config.json): hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128,
# intermediate 14336, vocab 128256.
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256
LINEARS = {  # name: (K, N) of x[M, K] @ W[K, N]
    "qkv": (HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM),
    "o": (HEADS * HEAD_DIM, HIDDEN),
    "gate_up": (HIDDEN, 2 * INTER),
    "down": (INTER, HIDDEN),
}
TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DECODE = [(b, c) for b in (1, 8, 32, 64, 128, 256) for c in (512, 2048, 8192)]
PREFILL = (512, 2048, 8192)
REPEATS, WARMUP = 30, 5


def _time(torch, fn) -> float:
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _linears(torch, dtype: str) -> dict[str, float]:
    out = {}
    for m in TOKENS:
        total = 0.0
        for k, n in LINEARS.values():
            total += _gemm(torch, m, k, n, dtype)
        out[str(m)] = total
    return out


def _gemm(torch, m: int, k: int, n: int, dtype: str) -> float:
    dev = "cuda"
    if dtype == "bf16":
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        return _time(torch, lambda: x @ w)
    x = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as required
    one = torch.tensor(1.0, device=dev)
    return _time(torch, lambda: torch._scaled_mm(x, w, scale_a=one, scale_b=one,
                                                 out_dtype=torch.bfloat16))


def _lm_head(torch) -> dict[str, float]:
    w = torch.randn(HIDDEN, VOCAB, device="cuda", dtype=torch.bfloat16)
    out = {}
    for m in (1, 8, 32, 64, 128, 256):
        x = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        out[str(m)] = _time(torch, lambda x=x: x @ w)
    return out


def _decode_attention(torch) -> dict[str, float]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {}
    for b, c in DECODE:
        q = torch.randn(b, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, KV_HEADS, c, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        out[f"{b}x{c}"] = _time(torch, lambda q=q, k=k, v=v: sdpa(q, k, v, enable_gqa=True))
    return out


def _prefill_attention(torch) -> dict[str, float]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {}
    for n in PREFILL:
        q = torch.randn(1, HEADS, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        out[str(n)] = _time(torch, lambda q=q, k=k, v=v: sdpa(q, k, v, is_causal=True,
                                                                 enable_gqa=True))
    return out


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "model": "Llama-3.1-8B shapes", "layers": LAYERS, "repeats": REPEATS,
        "linear_per_layer_s": {"bf16": _linears(torch, "bf16")},
        "lm_head_s": _lm_head(torch),
        "decode_attention_per_layer_s": _decode_attention(torch),
        "prefill_attention_per_layer_s": _prefill_attention(torch),
    }
    try:
        result["linear_per_layer_s"]["fp8"] = _linears(torch, "fp8")
    except (RuntimeError, AttributeError) as exc:  # no FP8 GEMM on this GPU / torch
        result["fp8_error"] = str(exc).splitlines()[0]
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}))


if __name__ == "__main__":
    main()
