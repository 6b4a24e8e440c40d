"""Synthetic request traces with the shape of a Profile (the `synth` command, DESIGN §2.4).

Owns turning a `Profile` back into a canonical request table (DESIGN §2.1): arrivals
(`arrivals`), joint lengths (`lengths`), sessions (`sessions`) and prefix-chained block hashes
(`prefix`), drawn chunk by chunk and written as Parquet in bounded memory. It reads nothing but
the Profile: no workspace, no source trace, no global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from core.atomic import atomic_path
from core.errors import UsageError
from core.load import MAX_RATE_RPS
from core.records import Record
from profiler.schema import Profile
from profiler.synthesis.arrivals import CHUNK_ROWS, arrival_stream, rechunk
from profiler.synthesis.lengths import Lengths, draw_lengths, length_model
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
from profiler.synthesis.sessions import DEFAULT_MEAN_TURNS, Sessions, draw_sessions, session_model

# CHUNK_ROWS (above) also sets the rows per written chunk: `_plans` reads it from this module.
# The profile's rate times this at most: the envelope's first windows grow with the scale
# (1e5 took 2 GB and minutes for 10 requests, 1e300 overflowed and hung).
MAX_RATE_SCALE = 1000.0
MAX_CHUNK_BLOCKS = 1 << 22  # prompt blocks per written chunk on the block-hash path


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
    lengths = length_model(profile, rngs[1].spawn(1)[0], notes)
    sessions = session_model(profile, mean_turns, notes)
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
    if rate_scale > MAX_RATE_SCALE:
        raise UsageError(f"rate_scale must be at most {MAX_RATE_SCALE:,.0f}, not {rate_scale!r}")
    if rate_rps is not None and not _positive(rate_rps):
        raise UsageError(f"--rate must be a finite number of req/s > 0, not {rate_rps!r}")
    if rate_rps is not None and rate_rps > MAX_RATE_RPS:
        raise UsageError(f"--rate must be at most {MAX_RATE_RPS:,.0f} req/s, not {rate_rps!r}")
    if not _positive(mean_turns) or mean_turns < 2:
        raise UsageError(f"mean_turns must be a finite number >= 2, not {mean_turns!r}")
    parent = Path(out_path).parent
    if not str(out_path) or not parent.is_dir():
        raise UsageError(f"cannot write {out_path!r}: directory {str(parent)!r} does not exist")


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# --- plan: the columns before block hashes (`Plan` is prefix.py's, which fills the hashes) -


def _plans(
    arrivals: Iterator[Any], lengths: Lengths, sessions: Sessions | None, n: int,
    rngs: list[Any],
) -> Iterator[Plan]:
    first_id, next_session = 0, 0
    for t in rechunk(arrivals, n, CHUNK_ROWS):
        size = len(t)
        inp, out = draw_lengths(lengths, rngs[0], size)
        plan = Plan(first_id, t, inp, out)
        if sessions is not None:
            plan.session, plan.multi = draw_sessions(sessions, rngs[1], size, next_session)
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
