"""The numpy k-means and silhouette behind the length segments, against data and formulas
written here: well-separated clusters are recovered, and the silhouette equals the textbook
O(n^2) definition."""

import math

import numpy as np
import pytest

from profiler.analysis.kmeans import kmeans, silhouette, silhouettes

TRUE_CENTRES = [(0.0, 0.0), (10.0, 0.0), (5.0, 9.0), (12.0, 12.0)]


def _blobs(centres, per, sd, seed):
    rng = np.random.default_rng(seed)
    points = np.concatenate([rng.normal(c, sd, size=(per, 2)) for c in centres])
    labels = np.repeat(np.arange(len(centres)), per)
    return points, labels


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_recovers_well_separated_clusters(k, seed):
    centres = TRUE_CENTRES[:k]
    points, truth = _blobs(centres, 300, 0.5, seed + 100)
    found, labels, inertia = kmeans(points, k, seed=seed)
    # Each true centre has one found centre within 4 standard errors of the sample mean
    # (sd 0.5 / sqrt(300) per axis) of its blob; each found centre matches a different one.
    matched = set()
    for i, c in enumerate(centres):
        blob_mean = points[truth == i].mean(axis=0)
        d = np.hypot(*(found - np.asarray(c)).T)
        j = int(d.argmin())
        assert d[j] < 4 * 0.5 / math.sqrt(300) * math.sqrt(2)
        assert np.allclose(found[j], blob_mean, atol=1e-9)  # exactly the blob's mean
        matched.add(j)
        assert set(labels[truth == i]) == {j}
    assert len(matched) == k
    expected_inertia = sum(((points[truth == i] - points[truth == i].mean(axis=0)) ** 2).sum()
                           for i in range(k))
    assert inertia == pytest.approx(expected_inertia, rel=1e-9)


def test_is_seeded():
    points, _ = _blobs(TRUE_CENTRES, 50, 3.0, 5)
    a = kmeans(points, 3, seed=4)
    b = kmeans(points, 3, seed=4)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_k_one_is_the_mean():
    points, _ = _blobs(TRUE_CENTRES, 20, 1.0, 2)
    centres, labels, inertia = kmeans(points, 1)
    assert np.allclose(centres[0], points.mean(axis=0))
    assert set(labels) == {0}
    assert inertia == pytest.approx(((points - points.mean(axis=0)) ** 2).sum())


def test_rejects_more_clusters_than_points():
    with pytest.raises(ValueError):
        kmeans(np.zeros((2, 2)), 3)


def _silhouette_direct(points, labels):
    """The definition, one point at a time."""
    n = len(points)
    total = 0.0
    for i in range(n):
        dist = {}
        for j in range(n):
            if j != i:
                dist.setdefault(labels[j], []).append(math.dist(points[i], points[j]))
        own = dist.get(labels[i], [])
        if not own:  # alone in its cluster
            continue
        a = sum(own) / len(own)
        b = min(sum(v) / len(v) for g, v in dist.items() if g != labels[i])
        total += (b - a) / max(a, b)
    return total / n


@pytest.mark.parametrize("seed", [0, 3])
def test_silhouette_matches_the_definition(seed):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(60, 2)) * [3, 1]
    labels = rng.integers(0, 3, size=60)
    labels[0] = 3  # a singleton cluster scores 0
    assert silhouette(points, labels) == pytest.approx(_silhouette_direct(points, labels),
                                                       rel=1e-12)


def test_silhouette_sample_scores_the_subset_only():
    rng = np.random.default_rng(9)
    points = rng.normal(size=(1500, 2))
    labels = (points[:, 0] > 0).astype(int)
    pick = np.random.default_rng(11).choice(1500, size=80, replace=False)
    expected = _silhouette_direct(points[pick], labels[pick])
    assert silhouette(points, labels, sample_size=80, seed=11) == pytest.approx(expected,
                                                                                rel=1e-12)


def test_silhouette_of_separated_blobs_is_near_one():
    points, labels = _blobs(TRUE_CENTRES[:2], 40, 0.1, 1)
    assert silhouette(points, labels) > 0.95


def test_several_labelings_score_each_on_the_same_subset():
    rng = np.random.default_rng(5)
    points = rng.normal(size=(700, 2)) * [2, 1]
    labelings = [(points[:, 0] > 0).astype(int), rng.integers(0, 4, size=700),
                 np.zeros(700, int)]  # one cluster: no silhouette
    pick = np.random.default_rng(2).choice(700, size=90, replace=False)
    scores = silhouettes(points, labelings, sample_size=90, seed=2)
    assert scores[2] is None
    for score, labels in zip(scores[:2], labelings[:2], strict=True):
        assert score == pytest.approx(_silhouette_direct(points[pick], labels[pick]), rel=1e-12)
    with pytest.raises(ValueError):
        silhouette(points, labelings[2])
