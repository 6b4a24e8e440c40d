"""Segment outlines lie on the segments' two-sigma ellipses."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.chart_data.segment_outlines import OUTLINE_SIGMAS, segment_outlines


def test_segment_outlines_are_two_sigma_ellipses(mooncake):
    _, profile, _ = mooncake
    outlines = segment_outlines(profile.segments)
    assert len(outlines) == len(profile.segments)
    for seg, outline in zip(profile.segments, outlines, strict=True):
        pts = np.log1p(np.array([outline.input_tokens, outline.output_tokens])).T
        delta = pts - [seg.log_input_mean, seg.log_output_mean]
        inv = np.linalg.inv(np.array(seg.log_cov))
        mahalanobis = np.sqrt(np.einsum("ij,jk,ik->i", delta, inv, delta))
        assert mahalanobis == pytest.approx(np.full(len(pts), OUTLINE_SIGMAS))
        assert outline.share == seg.share
