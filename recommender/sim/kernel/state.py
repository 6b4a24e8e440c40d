"""Per-request state layout: the columns of the int64 row (`S_*`) and the float64 row (`F_*`)
each request has in the loop, in serving order.
"""

from __future__ import annotations

# Per-request state: one int64 row and one float64 row per request (serving order), named
# columns. Two arrays instead of twenty keep the compiled loop free of reference counting.
(S_OUT, S_HOFF, S_NFULL, S_COMPUTED, S_NTOK, S_ODONE, S_HELD, S_PRIV, S_SCHED, S_STATUS,
 S_NPRE, S_LAST_STEP) = range(12)
N_S = 12
# arrival (closed loop: release time, written as users finish), first token, finish,
# speculative tokens accrued, last emission, largest gap between two emissions
F_ARR, F_FIRST, F_FIN, F_ACC, F_LAST, F_MAXGAP = range(6)
N_F = 6
