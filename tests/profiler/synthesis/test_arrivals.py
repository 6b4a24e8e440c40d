"""`profiler.synthesis.arrivals`: the Gamma shape inside the rate envelope is calibrated to the
profile's inter-arrival CV, and a CV the shape bounds cannot reach gets the bound.

The profile of a real trace (Mooncake conversation), as it is and with its CV set past each
bound; the CV of the stream's gaps is computed here with numpy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from profiler.analysis.profile import profile_trace
from profiler.synthesis.arrivals import arrival_stream
from profiler.workspace import Workspace
from tests import reference as ref

NOTE = re.compile(r"shape (\S+) \(calibrated: inter-arrival CV (\S+), profile (\S+)\)")


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    ws = Workspace.resolve(tmp_path_factory.mktemp("ws") / "w.duckdb")
    return profile_trace(str(ref.TRACES / "mooncake_conversation_trace.jsonl.gz"), workspace=ws)


def _stream(profile, n: int = 100_000, seed: int = 0) -> tuple[np.ndarray, tuple[float, ...]]:
    notes: list[str] = []
    stream = arrival_stream(profile, n, np.random.default_rng(seed), rate_scale=1.0,
                            rate_rps=None, notes=notes)
    at = next(stream)[:n]
    [note] = notes
    shape, cv, target = (float(v) for v in NOTE.search(note).groups())
    return at, (shape, cv, target)


def test_the_shape_gives_the_profiles_cv(mooncake):
    at, (shape, cv, target) = _stream(mooncake)
    assert target == pytest.approx(mooncake.interarrival_cv, abs=1e-3)
    assert 0.01 < shape < 1e4  # inside the bounds: found by the search, not clipped
    assert cv == pytest.approx(target, rel=5e-3)
    gaps = np.diff(at)
    assert gaps.std() / gaps.mean() == pytest.approx(target, rel=0.05)  # another draw


@pytest.mark.parametrize(("cv", "shape"), [(50.0, 0.01), (0.001, 1e4)])
def test_a_cv_past_the_bounds_gets_the_bound(mooncake, cv, shape):
    at, (got_shape, got_cv, _) = _stream(mooncake.model_copy(update={"interarrival_cv": cv}))
    assert got_shape == pytest.approx(shape, rel=1e-9)
    assert (got_cv < cv) if cv > 1 else (got_cv > cv)
    gaps = np.diff(at)
    assert gaps.std() / gaps.mean() == pytest.approx(got_cv, rel=0.05)
