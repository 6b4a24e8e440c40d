"""The length segments' outlines, for the Profile view: each segment's ellipse in log space
(`profiler.analysis.segments`), as token coordinates to draw. No query: drawn from a
`Profile`'s segments.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.records import Record
from profiler.schema import Segment

OUTLINE_SIGMAS = 2.0
OUTLINE_POINTS = 64


class SegmentOutline(Record):
    """A segment's ellipse (mean +/- OUTLINE_SIGMAS in log space), in tokens, to draw."""

    share: float
    input_tokens_p50: float
    output_tokens_p50: float
    input_tokens: list[float]
    output_tokens: list[float]


def segment_outlines(segments: Sequence[Segment]) -> list[SegmentOutline]:
    """Each segment's OUTLINE_SIGMAS ellipse of (ln(1 + input), ln(1 + output)), in tokens."""
    import numpy as np

    angle = np.linspace(0.0, 2.0 * np.pi, OUTLINE_POINTS)
    circle = np.stack([np.cos(angle), np.sin(angle)])
    outlines = []
    for seg in segments:
        values, vectors = np.linalg.eigh(np.asarray(seg.log_cov, dtype=float))
        axes = vectors * np.sqrt(np.clip(values, 0.0, None))
        points = OUTLINE_SIGMAS * axes @ circle + [[seg.log_input_mean], [seg.log_output_mean]]
        tokens = np.expm1(points)
        outlines.append(SegmentOutline(
            share=seg.share, input_tokens_p50=seg.input_tokens_p50,
            output_tokens_p50=seg.output_tokens_p50,
            input_tokens=tokens[0].tolist(), output_tokens=tokens[1].tolist()))
    return outlines
