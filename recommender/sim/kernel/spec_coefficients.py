"""The coefficient vector's slots after the forward's and the overheads'
(`kernel.coefficients`): speculative decoding (queries per decode, the draft's forwards and
their costs, tokens emitted per step), the closed-loop reentry time and the prefill scale
of a measured table.
"""

from __future__ import annotations

from recommender.sim.kernel.coefficients import COEF_FIELDS, N_COEF

(SPEC_Q, D_K, D_TOK, D_W, D_KV, D_FIX, D_CPU, SPEC_E, REENTRY, PF_SCALE) = range(
    COEF_FIELDS.index("spec_queries"), N_COEF)
