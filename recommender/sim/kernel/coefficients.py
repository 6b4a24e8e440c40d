"""The step formula's coefficient vector as the loop reads it: the field order
(`COEF_FIELDS`, `perf.StepCoefficients` named there and checked against it at import of
perf) and the slots of a forward's cost (compute, weight and KV bytes, MoE, communication),
the per-step overheads and the roofline exponent. The slots after these (speculative
decoding, closed-loop reentry, prefill scale) are in `kernel.spec_coefficients`.
"""

from __future__ import annotations

# The step formula's coefficients (`perf.StepCoefficients`, named there; this is its field
# order, checked at import of perf) and their slots in the float64 array the loop reads.
COEF_FIELDS = (
    "dense_flop_s", "sample_flop_s", "attn_flop_s", "dense_weight_s", "expert_weight_s",
    "kv_byte_s", "expert_keep", "expert_token_scale", "comm_token_s", "comm_fixed_s",
    "a2a_token_s", "a2a_fixed_s", "step_overhead_s", "seq_overhead_s", "roofline_p",
    "spec_queries", "draft_forwards", "draft_flop_s", "draft_weight_s", "draft_kv_s",
    "draft_fixed_s", "draft_cpu_s", "spec_tokens_per_step", "closed_loop_reentry_s",
    "prefill_scale",
)
(C_TOK, C_SAMP, C_ATTN, M_W, M_WE, M_KV, MOE_KEEP, MOE_TOK, COMM_TOK, COMM_FIX, A2A_TOK,
 A2A_FIX, OH_STEP, OH_SEQ, P) = range(COEF_FIELDS.index("spec_queries"))
N_COEF = len(COEF_FIELDS)
