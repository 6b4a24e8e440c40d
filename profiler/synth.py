"""Synthetic request traces with the shape of a Profile (the `synth` command, DESIGN §2.4).

Owns turning a `Profile` back into a canonical request table (DESIGN §2.1): arrivals, joint
lengths, sessions and prefix-chained block hashes, written as Parquet in bounded-memory chunks.
It reads nothing but the Profile: no workspace, no source trace, no global RNG.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from profiler.errors import UsageError
from profiler.schema import Profile, Record

CHUNK_ROWS = 1_000_000
MAX_CHUNK_BLOCKS = 1 << 22  # prompt blocks per written chunk on the block-hash path
ENVELOPE_WINDOW_S = 60.0
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MEAN_TURNS = 4.0
SESSION_SPREAD = 8  # about this many multi-turn sessions are in progress at once
POOL_CHAINS = 512  # shared system-prompt chains, drawn with Zipf popularity
POOL_ZIPF_A = 0.8
CALIBRATION_ROWS = 100_000
_SHAPE_BOUNDS = (1e-2, 1e4)  # Gamma shape = 1/CV² stays within CV 0.01 .. 10

_POOL_TAG, _SESSION_TAG, _UNIQUE_TAG, _ROOT_TAG = (t << 60 for t in (1, 2, 3, 4))


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
    arrivals = _arrival_stream(profile, n_requests, rngs[0], rate_scale=rate_scale,
                               rate_rps=rate_rps, notes=notes)
    lengths = _length_model(profile, rngs[1].spawn(1)[0], notes)
    sessions = _session_model(profile, mean_turns, notes)
    plans: Any = _plans(arrivals, lengths, sessions, n_requests, rngs[1:3])
    prefix = _prefix_setup(profile)
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


# --- arrivals --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Envelope:
    """Piecewise-constant rate over one period of the source (window starts, widths, counts)."""

    starts: Any
    widths: Any
    counts: Any
    period_s: float
    scale: float = 1.0  # synthetic requests per source request (sets the mean rate)
    shape: float = 1.0  # Gamma shape of the gaps inside a window


def _arrival_stream(
    profile: Profile, n: int, rng: Any, *, rate_scale: float, rate_rps: float | None,
    notes: list[str],
) -> Iterator[Any]:
    """An endless stream of arrival-time arrays (seconds, increasing, first arrival 0)."""
    series = profile.rate_series
    if not profile.duration_s or not profile.mean_qps or series is None:
        if rate_rps is None:
            raise UsageError("the profile has no arrival times: a rate must be given "
                             "(--rate REQ_PER_S)")
        rate = rate_rps * rate_scale
        notes.append(f"arrivals: Poisson at {rate:g} req/s (the profile has no arrival times)")
        return _poisson_stream(rng, rate)
    rate = (rate_rps or profile.mean_qps) * rate_scale
    env = _envelope(series.window_s, series.requests, profile.duration_s)
    env.scale = _rate_scale_factor(env, n, rate)
    target_cv = 1.0 if profile.interarrival_cv is None else profile.interarrival_cv
    env.shape, cv = _calibrate_shape(env, CALIBRATION_ROWS, target_cv, rng.spawn(1)[0])
    notes.append(
        f"arrivals: mean {rate:g} req/s ({'given rate' if rate_rps else 'profile mean_qps'} "
        f"x rate_scale {rate_scale:g}); rate envelope = the profile's request counts per "
        f"{env.widths[0]:g} s window, looped every {env.period_s:g} s, each window's count "
        f"fixed; inside a window a Gamma renewal process with shape {env.shape:.4g} "
        f"(calibrated: inter-arrival CV {cv:.3f}, profile {target_cv:.3f})"
    )
    return _shift_to_zero(_envelope_stream(env, rng))


def _envelope(window_s: float, requests: list[int], duration_s: float) -> _Envelope:
    """Source counts regrouped into windows of about `ENVELOPE_WINDOW_S` over one period.

    The period is a whole number of windows, so looped windows stay on the 60 s grid the
    profile counts peaks on; a partial last window keeps its rate, a short one is merged.
    """
    import numpy as np

    group = max(1, round(ENVELOPE_WINDOW_S / window_s)) if window_s < ENVELOPE_WINDOW_S else 1
    counts = np.asarray(requests, dtype=np.float64)
    counts = np.pad(counts, (0, -len(counts) % group)).reshape(-1, group).sum(axis=1)
    width = window_s * group
    exposure = duration_s - (len(counts) - 1) * width
    if len(counts) > 1 and exposure < width / 2:  # too short to estimate a rate
        counts = np.concatenate([counts[:-2], [counts[-2] + counts[-1]]])
    elif 0 < exposure < width:
        counts[-1] *= width / exposure
    starts = np.arange(len(counts)) * width
    return _Envelope(starts=starts, widths=np.full(len(counts), width), counts=counts,
                     period_s=float(len(counts) * width))


def _rate_scale_factor(env: _Envelope, n: int, rate: float) -> float:
    """Synthetic requests per source request so that n requests span n / rate seconds."""
    import numpy as np

    horizon = n / rate
    cycles, rem = divmod(horizon, env.period_s)
    i = max(0, int(np.searchsorted(env.starts, rem, side="right")) - 1)
    partial = env.counts[:i].sum() + env.counts[i] * min(1.0, (rem - env.starts[i]) /
                                                         env.widths[i])
    expected = cycles * env.counts.sum() + partial
    if expected <= 0:
        return rate * env.period_s / env.counts.sum()
    return float(n / expected)


def _window_counts(env: _Envelope, first: int, count: int) -> tuple[Any, Any, Any]:
    """Integer arrivals, start and width of global windows first .. first + count - 1.

    Counts round the cumulative expected count, so they never drift from the envelope.
    """
    import numpy as np

    g = np.arange(first, first + count, dtype=np.int64)
    cycle, src = np.divmod(g, len(env.counts))
    cum = np.concatenate([[0.0], np.cumsum(env.counts)])
    lo = env.scale * (cycle * cum[-1] + cum[src])
    hi = lo + env.scale * env.counts[src]
    counts = (np.floor(hi + 0.5) - np.floor(lo + 0.5)).astype(np.int64)
    return counts, cycle * env.period_s + env.starts[src], env.widths[src]


def _place(
    rng: Any, counts: Any, starts: Any, widths: Any, shape: float, *, pin: bool = False
) -> Any:
    """Arrival times: per window, `count` points split by count + 1 Gamma(shape) gaps.

    `pin` puts the first point of the first window at its start (the trace's t = 0).
    """
    import numpy as np

    keep = counts > 0
    counts, starts, widths = counts[keep], starts[keep], widths[keep]
    gaps = rng.gamma(shape, size=int(counts.sum() + len(counts)))
    if pin and len(gaps):
        gaps[0] = 0.0
    cs = np.cumsum(gaps)
    ends = np.cumsum(counts + 1) - 1
    base = np.concatenate([[0.0], cs[ends[:-1]]])
    total = cs[ends] - base
    owner = np.repeat(np.arange(len(counts)), counts)
    inner = np.ones(len(gaps), dtype=bool)
    inner[ends] = False
    frac = np.divide(cs[inner] - base[owner], total[owner],
                     out=np.zeros(len(owner)), where=total[owner] > 0)
    ends_s = starts + widths
    last = ends_s - 4 * np.spacing(ends_s)  # a point never rounds into the next window
    return np.minimum(starts[owner] + frac * widths[owner], last[owner])


def _envelope_stream(env: _Envelope, rng: Any, rows: int = CHUNK_ROWS) -> Iterator[Any]:
    per_window = env.scale * env.counts.sum() / len(env.counts)
    step = int(max(1, min(1 << 20, rows / max(per_window, 1e-9))))
    first = 0
    while True:
        counts, starts, widths = _window_counts(env, first, step)
        yield _place(rng, counts, starts, widths, env.shape, pin=first == 0)
        first += step


def _calibrate_shape(env: _Envelope, n: int, target_cv: float, rng: Any) -> tuple[float, float]:
    """The Gamma shape whose synthetic inter-arrival CV (over n requests) is nearest target."""
    import numpy as np

    state = rng.bit_generator.state

    def cv_at(shape: float) -> float:
        rng.bit_generator.state = state  # common random numbers: a smooth, monotone search
        env.shape = shape
        t = _take(_envelope_stream(env, rng, n), max(n, 2))
        gaps = np.diff(t)
        return float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0

    lo, hi = (math.log(b) for b in _SHAPE_BOUNDS)  # CV falls as the shape grows
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cv_at(math.exp(mid)) > target_cv else (lo, mid)
    shape = math.exp((lo + hi) / 2)
    return shape, cv_at(shape)


def _poisson_stream(rng: Any, rate: float) -> Iterator[Any]:
    import numpy as np

    t = 0.0
    while True:
        gaps = rng.exponential(1.0 / rate, CHUNK_ROWS)
        out = t + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        t = float(out[-1] + gaps[-1])
        yield out


def _shift_to_zero(stream: Iterator[Any]) -> Iterator[Any]:
    origin = None
    for t in stream:
        if len(t) == 0:
            continue
        origin = t[0] if origin is None else origin
        yield t - origin


def _take(stream: Iterator[Any], n: int) -> Any:
    import numpy as np

    parts, have = [], 0
    while have < n:
        parts.append(next(stream))
        have += len(parts[-1])
    return np.concatenate(parts)[:n]


def _rechunk(stream: Iterator[Any], n: int, size: int) -> Iterator[Any]:
    """Arrays of exactly `size` items (the last one shorter) from `stream`, n items in all."""
    import numpy as np

    buffer, have, done = [], 0, 0
    while done < n:
        want = min(size, n - done)
        while have < want:
            buffer.append(next(stream))
            have += len(buffer[-1])
        joined = np.concatenate(buffer)
        buffer, have = [joined[want:]], have - want
        done += want
        yield joined[:want]


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


# --- plan: the columns before block hashes ---------------------------------------------------


@dataclass(slots=True)
class _Plan:
    """One chunk of requests (request ids first_id ..) before block hashes are attached."""

    first_id: int
    arrival_s: Any
    input_tokens: Any
    output_tokens: Any
    session: Any | None = None  # int64 session ids
    multi: Any | None = None  # requests of multi-turn sessions
    hash_offsets: Any | None = None
    hash_values: Any | None = None


def _plans(
    arrivals: Iterator[Any], lengths: _Lengths, sessions: _Sessions | None, n: int,
    rngs: list[Any],
) -> Iterator[_Plan]:
    first_id, next_session = 0, 0
    for t in _rechunk(arrivals, n, CHUNK_ROWS):
        size = len(t)
        inp, out = _draw_lengths(lengths, rngs[0], size)
        plan = _Plan(first_id, t, inp, out)
        if sessions is not None:
            plan.session, plan.multi = _draw_sessions(sessions, rngs[1], size, next_session)
            next_session = int(plan.session.max()) + 1
        first_id += size
        yield plan


# --- prefix reuse: block hashes --------------------------------------------------------------


@dataclass(slots=True)
class _Prefix:
    block_size: int
    target: float


def _prefix_setup(profile: Profile) -> _Prefix | None:
    if profile.prefix_reuse_infinite is None:
        return None
    return _Prefix(block_size=int(profile.format.block_size or DEFAULT_BLOCK_SIZE),
                   target=float(profile.prefix_reuse_infinite))


@dataclass(slots=True)
class _Chains:
    """Per request of the whole trace: blocks, chains, and the search state for `share`."""

    n_blocks: Any
    pool: Any  # shared system-prompt chain of the request (its session's, for sessions)
    jitter: Any  # uniform [0, 1): randomized rounding of share * n_blocks
    follow: Any  # a later turn of a multi-turn session
    first: Any  # index of the first request of the request's session (itself if single)
    by_pool: Any  # request order sorted by pool chain (stable)
    by_session: Any  # multi-turn requests sorted by their session's first request (stable)


def _with_hashes(
    plans: list[_Plan], prefix: _Prefix, rng: Any, *, seed: int, profile: Profile,
    notes: list[str],
) -> Iterator[_Plan]:
    """The plans, split where needed, with prefix-chained block hashes whose infinite-cache
    reuse is nearest the profile's (hashes are made one piece at a time, as written)."""
    chains = _chains(plans, prefix.block_size, rng)
    share, reached = _search_share(chains, prefix.target)
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


def _hashed(plans: list[_Plan], chains: _Chains, share: float, seed: int) -> Iterator[_Plan]:
    k, covered = _shared_runs(chains, share)
    done = 0
    for plan in plans:
        size = len(plan.arrival_s)
        for piece, part in _split(plan, chains.n_blocks[done:done + size], done):
            _attach(piece, chains, k=k, covered=covered, part=part, seed=seed)
            yield piece
        done += size


def _chains(plans: list[_Plan], block_size: int, rng: Any) -> _Chains:
    import numpy as np

    inp = np.concatenate([p.input_tokens for p in plans]).astype(np.int64)
    n_blocks = (inp + block_size - 1) // block_size
    n = len(n_blocks)
    weights = 1.0 / np.arange(1, POOL_CHAINS + 1) ** POOL_ZIPF_A
    pool = np.searchsorted(np.cumsum(weights) / weights.sum(), rng.random(n), side="right")
    pool = np.minimum(pool, POOL_CHAINS - 1)
    jitter = rng.random(n)
    first = np.arange(n)
    follow = np.zeros(n, dtype=bool)
    by_session = np.zeros(0, dtype=np.int64)
    if plans[0].multi is not None:
        session = np.concatenate([p.session for p in plans])
        multi = np.concatenate([p.multi for p in plans])
        _, first_of, inverse = np.unique(session, return_index=True, return_inverse=True)
        first = first_of[inverse]
        follow = multi & (first != np.arange(n))
        pool = pool[first]
        where = np.flatnonzero(multi)
        by_session = where[np.argsort(first[where], kind="stable")]
    return _Chains(n_blocks, pool, jitter, follow, first,
                   np.argsort(pool, kind="stable"), by_session)


def _shared_runs(chains: _Chains, share: float) -> tuple[Any, Any]:
    """(k, covered): leading blocks shared with a chain, and how many of them are the pool's."""
    import numpy as np

    k = np.minimum(np.floor(share * chains.n_blocks + chains.jitter), chains.n_blocks)
    k = k.astype(np.int64)
    covered = np.where(chains.follow, np.minimum(k, k[chains.first]), k)
    return k, covered


def _reuse(chains: _Chains, share: float) -> float:
    """Infinite-cache reuse of the blocks `_attach` writes for this share (DESIGN §2.2)."""
    import numpy as np

    k, covered = _shared_runs(chains, share)
    seen = np.minimum(covered, _prev_max(covered, chains.by_pool, chains.pool)).sum()
    if len(chains.by_session):
        idx = chains.by_session
        own = k[chains.first[idx]]  # the session's own blocks start after its first turn's run
        prior = _prev_max(k, idx, chains.first)[idx]
        seen += np.maximum(np.minimum(k[idx], prior) - own, 0)[chains.follow[idx]].sum()
    total = chains.n_blocks.sum()
    return float(seen / total) if total else 0.0


def _prev_max(values: Any, order: Any, group: Any) -> Any:
    """Per request, the max of `values` over earlier requests of its group (0 if none).

    `order` lists requests sorted by group, ties in request order; the result is indexed by
    request (entries outside `order` are 0).
    """
    import numpy as np

    big = np.int64(1 << 32)
    g = group[order].astype(np.int64)
    running = np.maximum.accumulate(g * big + values[order])
    prior = np.concatenate([[-1], running[:-1]]) - g * big
    out = np.zeros(len(values), dtype=np.int64)
    out[order] = np.maximum(prior, 0)
    return out


def _search_share(chains: _Chains, target: float) -> tuple[float, float]:
    """The shared fraction whose reuse is nearest `target` (reuse grows with it)."""
    lo, hi = 0.0, 1.0
    if _reuse(chains, hi) <= target:
        return hi, _reuse(chains, hi)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _reuse(chains, mid) < target else (lo, mid)
    best = min((lo, hi), key=lambda s: abs(_reuse(chains, s) - target))
    return best, _reuse(chains, best)


def _split(plan: _Plan, n_blocks: Any, first: int) -> Iterator[tuple[_Plan, slice]]:
    """Pieces of `plan` holding at most MAX_CHUNK_BLOCKS blocks (at least one request each),
    with each piece's slice of the whole trace's per-request arrays."""
    import numpy as np

    cum = np.cumsum(n_blocks)
    start = 0
    while start < len(n_blocks):
        base = cum[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(cum, base + MAX_CHUNK_BLOCKS, side="right")))
        piece = _Plan(
            plan.first_id + start, plan.arrival_s[start:stop], plan.input_tokens[start:stop],
            plan.output_tokens[start:stop],
            None if plan.session is None else plan.session[start:stop],
            None if plan.multi is None else plan.multi[start:stop],
        )
        yield piece, slice(first + start, first + stop)
        start = stop


def _mix(x: Any) -> Any:
    """splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    import numpy as np

    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _tagged(tag: int, keys: Any) -> Any:
    import numpy as np

    return _mix(keys.astype(np.uint64) | np.uint64(tag))


def _attach(
    plan: _Plan, chains: _Chains, *, k: Any, covered: Any, part: slice, seed: int
) -> None:
    """Block hashes for the requests of `plan` (trace-wide arrays sliced by `part`).

    Block i's identity is its pool chain's (i < covered), its session's (i < k) or the
    request's own; its hash mixes block i - 1's hash with that identity.
    """
    import numpy as np

    nb, k, covered = chains.n_blocks[part], k[part], covered[part]
    offsets = np.concatenate([[0], np.cumsum(nb)])
    owner = np.repeat(np.arange(len(nb)), nb)
    pos = np.arange(offsets[-1]) - offsets[owner]
    sess = chains.first[part]
    rid = np.arange(part.start, part.stop)
    ident = np.where(
        pos < covered[owner], _tagged(_POOL_TAG, chains.pool[part])[owner],
        np.where(pos < k[owner], _tagged(_SESSION_TAG, sess)[owner],
                 _tagged(_UNIQUE_TAG, rid)[owner]),
    )
    hashes = np.empty(offsets[-1], dtype=np.uint64)
    root = _mix(np.array([(seed & ((1 << 56) - 1)) | _ROOT_TAG], dtype=np.uint64))[0]
    by_len = np.argsort(nb, kind="stable")
    sorted_nb = nb[by_len]
    for p in range(int(sorted_nb[-1]) if len(nb) else 0):
        alive = by_len[np.searchsorted(sorted_nb, p, side="right"):]
        idx = offsets[alive] + p
        prev = hashes[idx - 1] if p else root
        hashes[idx] = _mix(prev ^ ident[idx])
    plan.hash_offsets, plan.hash_values = offsets, hashes


# --- write -----------------------------------------------------------------------------------


def _arrow_schema() -> Any:
    """The canonical request table (schema.REQUEST_COLUMNS) as an Arrow schema."""
    import pyarrow as pa

    from profiler.schema import REQUEST_COLUMNS

    types = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "INTEGER": pa.int32(),
             "VARCHAR": pa.string(), "UBIGINT[]": pa.list_(pa.uint64()), "BOOLEAN": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in REQUEST_COLUMNS.items()])


def _table(plan: _Plan, schema: Any, block_size: int | None) -> Any:
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
    if plan.hash_values is not None:
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
    """Write every plan to `out_path` via a temporary file beside it; the last arrival (s)."""
    import uuid

    import pyarrow.parquet as pq

    path = Path(out_path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    schema = _arrow_schema()
    last = 0.0
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for plan in plans:
                writer.write_table(_table(plan, schema, block_size))
                last = float(plan.arrival_s[-1])
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return last
