"""Synthetic request traces with the shape of a Profile (the `synth` command, DESIGN §2.4).

Owns turning a `Profile` back into a canonical request table (DESIGN §2.1): arrivals
(`arrivals`), joint lengths, sessions and prefix-chained block hashes (`prefix`),
written as Parquet in bounded-memory chunks.
It reads nothing but the Profile: no workspace, no source trace, no global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from core.atomic import atomic_path
from core.errors import UsageError
from core.records import Record
from profiler.schema import Profile
from profiler.synthesis.arrivals import CHUNK_ROWS, arrival_stream, rechunk
from profiler.synthesis.prefix import (
    POOL_CHAINS,
    POOL_ZIPF_A,
    Chains,
    Plan,
    Prefix,
    attach,
    build_chains,
    prefix_setup,
    search_share,
    shared_runs,
)

# CHUNK_ROWS (above) also sets the rows per written chunk: `_plans` reads it from this module.
MAX_CHUNK_BLOCKS = 1 << 22  # prompt blocks per written chunk on the block-hash path
DEFAULT_MEAN_TURNS = 4.0
SESSION_SPREAD = 8  # about this many multi-turn sessions are in progress at once


class SynthSummary(Record):
    """What `synthesize` wrote, and which modelling choices and defaults it made."""

    n_requests: int = Field(description="rows written")
    duration_s: float = Field(description="last arrival minus first arrival, seconds")
    out_path: str = Field(description="the Parquet file written")
    block_size: int | None = Field(
        description="tokens per block of block_hashes; None when no hashes were written"
    )
    notes: list[str] = Field(description="what was modelled and which defaults were assumed")


def synthesize(
    profile: Profile,
    *,
    n_requests: int,
    out_path: str,
    seed: int = 0,
    rate_scale: float = 1.0,
    rate_rps: float | None = None,
    mean_turns: float = DEFAULT_MEAN_TURNS,
) -> SynthSummary:
    """Write a synthetic trace of `n_requests` rows shaped like `profile` to `out_path`.

    The file is ServeFit's canonical request table (DESIGN §2.1) as Parquet, first arrival at
    0.0 s. Reproduced from the profile alone: the mean rate, the 60 s rate envelope (looped),
    the inter-arrival CV, the joint (input, output) token distribution, the multi-turn share
    and the infinite-cache prefix reuse. The same arguments give a byte-identical file.

    Args:
        profile: the source profile.
        n_requests: rows to write (>= 1).
        out_path: Parquet file to (over)write; its directory must exist. Written to a temporary
            file beside it and renamed at the end, so a failure leaves nothing behind.
        seed: seed of every random draw (numpy `default_rng`).
        rate_scale: multiplies the mean request rate (req/s); the envelope's shape is kept.
        rate_rps: mean request rate (req/s) replacing `profile.mean_qps` (then scaled by
            `rate_scale`). Required when the profile has no arrival times; arrivals are then
            a Poisson process.
        mean_turns: mean turns per multi-turn session (>= 2), used when the profile has
            sessions.

    Returns:
        A summary with the notes on what was modelled and assumed.

    Raises:
        UsageError: an argument is invalid, the profile has no arrival times and no
            `rate_rps` was given, or `out_path` cannot be written.
    """
    _check_args(n_requests, rate_scale, rate_rps, mean_turns, out_path)
    import numpy as np

    rngs = np.random.default_rng(seed).spawn(4)
    notes: list[str] = []
    arrivals = arrival_stream(profile, n_requests, rngs[0], rate_scale=rate_scale,
                              rate_rps=rate_rps, notes=notes)
    lengths = _length_model(profile, rngs[1].spawn(1)[0], notes)
    sessions = _session_model(profile, mean_turns, notes)
    plans: Any = _plans(arrivals, lengths, sessions, n_requests, rngs[1:3])
    prefix = prefix_setup(profile)
    block_size = None
    if prefix is not None:
        block_size = prefix.block_size
        plans = _with_hashes(list(plans), prefix, rngs[3], seed=seed, profile=profile, notes=notes)
    notes.append("not modelled: model and status are null, tokens_estimated is false")
    duration = _write(plans, out_path, block_size)
    return SynthSummary(n_requests=n_requests, duration_s=duration, out_path=str(out_path),
                        block_size=block_size, notes=notes)


def _check_args(
    n: int, rate_scale: float, rate_rps: float | None, mean_turns: float, out_path: str
) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"--requests must be a whole number >= 1, not {n!r}")
    if not _positive(rate_scale):
        raise UsageError(f"rate_scale must be a finite number > 0, not {rate_scale!r}")
    if rate_rps is not None and not _positive(rate_rps):
        raise UsageError(f"--rate must be a finite number of req/s > 0, not {rate_rps!r}")
    if not _positive(mean_turns) or mean_turns < 2:
        raise UsageError(f"mean_turns must be a finite number >= 2, not {mean_turns!r}")
    parent = Path(out_path).parent
    if not str(out_path) or not parent.is_dir():
        raise UsageError(f"cannot write {out_path!r}: directory {str(parent)!r} does not exist")


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# --- lengths ---------------------------------------------------------------------------------


_QUANTILE_LEVELS = (0.5, 0.9, 0.99)
_PILOT_ROWS = 200_000


@dataclass(slots=True)
class _Lengths:
    """Gaussian mixture in (ln(1 + input), ln(1 + output)), then a marginal quantile map."""

    cum_share: Any
    mean: Any  # (segments, 2)
    chol: Any  # (segments, 3): l00, l10, l11 of the lower-triangular factor
    bounds: tuple[tuple[float, float], tuple[float, float]]
    knots: list[tuple[Any, Any] | None]  # per side: mixture quantiles -> profile quantiles


def _length_model(profile: Profile, rng: Any, notes: list[str]) -> _Lengths:
    import numpy as np

    segs = profile.segments
    if not segs:
        raise UsageError("the profile has no length segments: re-profile the trace")
    share = np.array([max(s.share, 0.0) for s in segs])
    stats = (profile.input_tokens, profile.output_tokens)
    model = _Lengths(
        cum_share=np.cumsum(share) / share.sum(),
        mean=np.array([[s.log_input_mean, s.log_output_mean] for s in segs]),
        chol=np.array([_chol2(s.log_cov) for s in segs]),
        bounds=((stats[0].min, stats[0].max), (stats[1].min, stats[1].max)),
        knots=[None, None],
    )
    pilot = _mixture_logs(model, rng, _PILOT_ROWS)
    for side, (x, st) in enumerate(zip(pilot, stats, strict=True)):
        xk = np.quantile(x, _QUANTILE_LEVELS)
        yk = np.log1p([st.p50, st.p90, st.p99])
        if np.all(np.diff(xk) > 0) and np.all(np.diff(yk) >= 0):
            model.knots[side] = (xk, yk)
    notes.append(
        f"lengths: {len(segs)} segment(s) drawn by share, each a bivariate normal in "
        "(ln(1+input), ln(1+output)) with the segment's mean and covariance; each marginal "
        "then mapped (monotone, piecewise linear in log space) onto the profile's p50/p90/p99, "
        f"rounded and clipped to the profile's ranges (input {stats[0].min:g}..{stats[0].max:g}"
        f", output {stats[1].min:g}..{stats[1].max:g})"
    )
    return model


def _chol2(cov: list[list[float]]) -> tuple[float, float, float]:
    """Lower-triangular factor of a 2x2 covariance, tolerant of (near-)singular ones."""
    v00, v01, v11 = max(cov[0][0], 0.0), cov[0][1], max(cov[1][1], 0.0)
    l00 = math.sqrt(v00)
    l10 = v01 / l00 if l00 > 0 else 0.0
    return l00, l10, math.sqrt(max(v11 - l10 * l10, 0.0))


def _mixture_logs(model: _Lengths, rng: Any, n: int) -> tuple[Any, Any]:
    import numpy as np

    seg = np.minimum(np.searchsorted(model.cum_share, rng.random(n), side="right"),
                     len(model.cum_share) - 1)
    z = rng.standard_normal((2, n))
    mean, chol = model.mean[seg], model.chol[seg]
    return (mean[:, 0] + chol[:, 0] * z[0], mean[:, 1] + chol[:, 1] * z[0] + chol[:, 2] * z[1])


def _draw_lengths(model: _Lengths, rng: Any, n: int) -> tuple[Any, Any]:
    """(input_tokens, output_tokens) as int32 arrays of length n."""
    import numpy as np

    out = []
    for logs, knots, (lo, hi) in zip(_mixture_logs(model, rng, n), model.knots, model.bounds,
                                     strict=True):
        x = logs if knots is None else _remap(logs, *knots)
        tokens = np.rint(np.expm1(x, out=x), out=x)
        out.append(np.clip(tokens, lo, hi, out=tokens).astype(np.int32))
    return out[0], out[1]


def _remap(x: Any, xk: Any, yk: Any) -> Any:
    """Piecewise-linear map through knots xk -> yk; beyond the ends, shifted like the ends."""
    import numpy as np

    inner = np.interp(x, xk, yk)
    return np.where(x < xk[0], x + (yk[0] - xk[0]),
                    np.where(x > xk[-1], x + (yk[-1] - xk[-1]), inner))


# --- sessions --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sessions:
    share: float
    mean_turns: float


def _session_model(profile: Profile, mean_turns: float, notes: list[str]) -> _Sessions | None:
    share = profile.multi_turn_share
    if share is None:
        notes.append("sessions: none (the profile has no session ids)")
        return None
    notes.append(
        f"sessions: each request is a turn of a multi-turn session with probability "
        f"{share:.3f} (the profile's multi_turn_share), else a one-request session; turns "
        f"per multi-turn session = 2 + geometric, mean {mean_turns:g} (assumed default, "
        f"mean_turns); turns take successive multi-turn arrivals, about {SESSION_SPREAD} "
        "sessions interleaved at a time (assumed)"
    )
    return _Sessions(share=min(max(share, 0.0), 1.0), mean_turns=mean_turns)


def _draw_sessions(model: _Sessions, rng: Any, n: int, first_id: int) -> tuple[Any, Any]:
    """(session ids int64, multi-turn flags) for n consecutive requests; ids from first_id."""
    import numpy as np

    multi = rng.random(n) < model.share
    where = np.flatnonzero(multi)
    m = len(where)
    ids = np.empty(n, dtype=np.int64)
    n_sessions = 0
    if m >= 2:
        p = 1.0 / (model.mean_turns - 1.0)
        sizes = 1 + rng.geometric(p, size=int(m / model.mean_turns * 1.5) + 16)
        while sizes.sum() < m:
            sizes = np.concatenate([sizes, 1 + rng.geometric(p, size=len(sizes))])
        labels = np.repeat(np.arange(len(sizes)), sizes)[:m]
        if labels[-1] != labels[-2]:  # a cut-off one-turn session joins the one before
            labels[-1] = labels[-2]
        spread = SESSION_SPREAD * model.mean_turns
        labels = labels[np.argsort(np.arange(m) + rng.random(m) * spread, kind="stable")]
        ids[where] = first_id + labels
        n_sessions = int(labels.max()) + 1
    else:
        multi[:] = False
    singles = np.flatnonzero(~multi)
    ids[singles] = first_id + n_sessions + np.arange(len(singles))
    return ids, multi


# --- plan: the columns before block hashes (`Plan` is prefix.py's, which fills the hashes) -


def _plans(
    arrivals: Iterator[Any], lengths: _Lengths, sessions: _Sessions | None, n: int,
    rngs: list[Any],
) -> Iterator[Plan]:
    first_id, next_session = 0, 0
    for t in rechunk(arrivals, n, CHUNK_ROWS):
        size = len(t)
        inp, out = _draw_lengths(lengths, rngs[0], size)
        plan = Plan(first_id, t, inp, out)
        if sessions is not None:
            plan.session, plan.multi = _draw_sessions(sessions, rngs[1], size, next_session)
            next_session = int(plan.session.max()) + 1
        first_id += size
        yield plan


# --- block hashes, one written piece at a time -----------------------------------------------
# The hash model is prefix.py's; splitting into pieces of MAX_CHUNK_BLOCKS is a write bound.


def _with_hashes(
    plans: list[Plan], prefix: Prefix, rng: Any, *, seed: int, profile: Profile,
    notes: list[str],
) -> Iterator[Plan]:
    """The plans, split where needed, with prefix-chained block hashes whose infinite-cache
    reuse is nearest the profile's (hashes are made one piece at a time, as written)."""
    chains = build_chains(plans, prefix.block_size, rng)
    share, reached = search_share(chains, prefix.target)
    assumed = "" if profile.format.block_size else " (assumed: the profile has none)"
    notes.append(
        f"prefix reuse: block_size {prefix.block_size}{assumed}; each request shares a "
        f"leading run of about {share:.3f} of its blocks with a chain (a later turn: its "
        f"session's, extending the earlier turns' prompts; else one of {POOL_CHAINS} "
        f"system-prompt chains with Zipf({POOL_ZIPF_A:g}) popularity, assumed), the rest "
        f"unique; each hash mixes the previous block's hash with the block's identity; "
        f"infinite-cache reuse {reached:.3f} (profile {prefix.target:.3f}); LRU hit ratios "
        f"are not fitted (profile: {profile.prefix_reuse_lru or 'none'})"
    )
    return _hashed(plans, chains, share, seed)


def _hashed(plans: list[Plan], chains: Chains, share: float, seed: int) -> Iterator[Plan]:
    k, covered = shared_runs(chains, share)
    done = 0
    for plan in plans:
        size = len(plan.arrival_s)
        for piece, part in _split(plan, chains.n_blocks[done:done + size], done):
            attach(piece, chains, k=k, covered=covered, part=part, seed=seed)
            yield piece
        done += size


def _split(plan: Plan, n_blocks: Any, first: int) -> Iterator[tuple[Plan, slice]]:
    """Pieces of `plan` holding at most MAX_CHUNK_BLOCKS blocks (at least one request each),
    with each piece's slice of the whole trace's per-request arrays."""
    import numpy as np

    cum = np.cumsum(n_blocks)
    start = 0
    while start < len(n_blocks):
        base = cum[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(cum, base + MAX_CHUNK_BLOCKS, side="right")))
        piece = Plan(
            plan.first_id + start, plan.arrival_s[start:stop], plan.input_tokens[start:stop],
            plan.output_tokens[start:stop],
            None if plan.session is None else plan.session[start:stop],
            None if plan.multi is None else plan.multi[start:stop],
        )
        yield piece, slice(first + start, first + stop)
        start = stop


# --- write -----------------------------------------------------------------------------------


def _arrow_schema() -> Any:
    """The canonical request table (schema.REQUEST_COLUMNS) as an Arrow schema."""
    import pyarrow as pa

    from profiler.schema import REQUEST_COLUMNS

    types = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "INTEGER": pa.int32(),
             "VARCHAR": pa.string(), "UBIGINT[]": pa.list_(pa.uint64()), "BOOLEAN": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in REQUEST_COLUMNS.items()])


def _table(plan: Plan, schema: Any, block_size: int | None) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(plan.arrival_s)
    session = pa.nulls(n, pa.string())
    if plan.session is not None:
        session = pc.binary_join_element_wise("s", pc.cast(pa.array(plan.session), pa.string()),
                                              "")
    hashes = pa.nulls(n, pa.list_(pa.uint64()))
    sizes = pa.nulls(n, pa.int32())
    if plan.hash_values is not None and plan.hash_offsets is not None:  # attached together
        hashes = pa.ListArray.from_arrays(pa.array(plan.hash_offsets.astype(np.int32)),
                                          pa.array(plan.hash_values, pa.uint64()))
        sizes = pa.array(np.full(n, block_size, dtype=np.int32))
    columns = [
        pa.array(np.arange(plan.first_id, plan.first_id + n, dtype=np.int64)),
        pa.array(plan.arrival_s, pa.float64()),
        pa.array(plan.input_tokens, pa.int32()),
        pa.array(plan.output_tokens, pa.int32()),
        session,
        pa.nulls(n, pa.string()),
        hashes,
        sizes,
        pa.nulls(n, pa.string()),
        pa.array(np.zeros(n, dtype=bool)),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _write(plans: Any, out_path: str, block_size: int | None) -> float:
    """Write every plan to `out_path`, whole or not at all (`core.atomic`); the last
    arrival (s)."""
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    last = 0.0
    try:
        with atomic_path(out_path) as tmp, pq.ParquetWriter(tmp, schema) as writer:
            for plan in plans:
                writer.write_table(_table(plan, schema, block_size))
                last = float(plan.arrival_s[-1])
    except OSError as exc:
        raise UsageError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    return last
