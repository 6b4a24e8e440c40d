"""One run's rows and the filters over them: a run (a block of consecutive CSV rows with one
setup and no metric twice) states one measurement once, so `one_throughput_per_run` keeps one
of the throughputs a page restates and `chunk_gap_itl` drops the ITL of a chunked stream.
"""

from __future__ import annotations

import dataclasses

from recommender.calibration.cal_row import CalRow

# Above this ITL / TPOT ratio a run's ITL is the gap between stream chunks. Token-by-token
# streams measure the two within 1.34x of each other in the CSV (the token-weighted and the
# per-request mean of the same gaps); chunked ones at 10x and 30x.
CHUNKED_ITL_RATIO = 1.5


def chunk_gap_itl(rows: list[CalRow]) -> tuple[list[CalRow], list[tuple[int, str]]]:
    """(rows, [(row index, why skipped)]) without the ITL of runs whose server streamed
    tokens in chunks: InferenceX's launch scripts set TRT-LLM's `stream_interval: 10` and
    SGLang's `--stream-interval 30`, so the client sees one chunk per 10 or 30 decode steps
    and its mean ITL is that many TPOTs. The model predicts the per-token gap, and the rows
    do not state the interval, so such an ITL says nothing it can be scored on."""
    out, skipped = [], []
    for block in _runs(rows):
        by_metric = {r.metric: r for r in block}
        itl, tpot = by_metric.get("itl_s"), by_metric.get("tpot_s")
        ratio = itl.value / tpot.value if itl and tpot and tpot.value > 0 else 0.0
        for r in block:
            if r is itl and ratio > CHUNKED_ITL_RATIO:
                skipped.append((r.index, f"ITL {ratio:.1f}x the run's TPOT: a chunked "
                                         "stream's gap, not a token's"))
            else:
                out.append(r)
    return out, skipped


# A run's throughput in the order it is kept when a page states it several ways.
THROUGHPUT_ORDER = ("output_throughput_tok_s", "total_throughput_tok_s",
                    "request_throughput_rps")


def one_throughput_per_run(rows: list[CalRow]) -> tuple[list[CalRow], list[tuple[int, str]]]:
    """(rows, [(row index, why skipped)]) with one throughput figure per run: a page that
    prints requests/s, output tokens/s and total tokens/s of one run (vllm bench serve does)
    states one measurement three ways (total = output x (ISL + OSL) / OSL, requests =
    output / OSL at the run's mean lengths), and counting it three times would give its
    publisher three votes in every median. Output tokens/s is kept, else total, else
    requests/s; the run's latencies stay. A run is a block of consecutive rows with one
    setup and no metric twice (a page's runs that differ only in flags the rows do not
    parse stay apart)."""
    out, skipped = [], []
    for block in _runs(rows):
        throughputs = [r for r in block if r.metric in THROUGHPUT_ORDER]
        keep = min(throughputs, key=lambda r: THROUGHPUT_ORDER.index(r.metric), default=None)
        for r in block:
            if r.metric in THROUGHPUT_ORDER and r is not keep:
                skipped.append((r.index, f"restates row {keep.index}'s throughput "  # type: ignore[union-attr]
                                         "(one run, one throughput figure)"))
            else:
                out.append(r)
    return out, skipped


_NOT_SETUP = ("index", "metric", "value", "split")


def _runs(rows: list[CalRow]) -> list[list[CalRow]]:
    # a row's setup is every field but what one run's rows differ in (getattr, not asdict:
    # asdict deep-copies every row on every call, ~4 s a parse)
    names = sorted(f.name for f in dataclasses.fields(CalRow) if f.name not in _NOT_SETUP)

    def setup(r: CalRow) -> tuple:
        return tuple(getattr(r, k) for k in names)

    blocks: list[list[CalRow]] = []
    for r in sorted(rows, key=lambda r: r.index):
        last = blocks[-1] if blocks else None
        if (last and setup(last[-1]) == setup(r) and last[-1].index == r.index - 1
                and r.metric not in {x.metric for x in last}):
            last.append(r)
        else:
            blocks.append([r])
    return blocks
