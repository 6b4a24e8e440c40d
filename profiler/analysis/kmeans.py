"""Small seeded k-means and silhouette score in numpy, for the length segments.

The segments cluster at most a few thousand 2-D points into at most four groups: a numpy Lloyd
loop does that in milliseconds, where importing scikit-learn alone took 1-3 s of every
`profile` run. k-means++ seeding, `n_init` seeded restarts, the run with the lowest inertia
wins; the silhouette is the mean over points of (b - a) / max(a, b) (0 for a point alone in its
cluster), as scikit-learn defines it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_ITER = 100
TOL = 1e-4  # stop when the centres move less than this (relative to the data's variance)


def kmeans(
    points: Any, k: int, *, seed: int = 0, n_init: int = 3
) -> tuple[np.ndarray, np.ndarray, float]:
    """(centres k x d, labels n, inertia) of the best of `n_init` seeded k-means++ runs.

    `points` is an n x d array with n >= k.
    """
    x = np.asarray(points, dtype=float)
    if k < 1 or len(x) < k:
        raise ValueError(f"k-means needs 1 <= k <= n points, got k={k}, n={len(x)}")
    rng = np.random.default_rng(seed)
    tol = TOL * float(np.mean(np.var(x, axis=0)))
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(n_init):
        centres, labels, inertia = _lloyd(x, _plus_plus(x, k, rng), tol)
        if best is None or inertia < best[2]:
            best = (centres, labels, inertia)
    assert best is not None  # n_init >= 1
    return best


def _plus_plus(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre drawn with probability proportional to D^2."""
    centres = [x[rng.integers(len(x))]]
    d2 = ((x - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = d2.sum()
        # All points on the chosen centres: any point will do (duplicates are handled by Lloyd).
        i = int(rng.choice(len(x), p=d2 / total)) if total > 0 else int(rng.integers(len(x)))
        centres.append(x[i])
        d2 = np.minimum(d2, ((x - x[i]) ** 2).sum(axis=1))
    return np.array(centres)


def _lloyd(x: np.ndarray, centres: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, float]:
    k = len(centres)
    for _ in range(MAX_ITER):
        d2 = _sq_dist(x, centres)
        labels = d2.argmin(axis=1)
        counts = np.bincount(labels, minlength=k)
        sums = np.stack([np.bincount(labels, weights=x[:, j], minlength=k)
                         for j in range(x.shape[1])], axis=1)
        new = centres.copy()
        filled = counts > 0
        new[filled] = sums[filled] / counts[filled, None]
        # An empty cluster takes the point farthest from its centre, so k clusters remain.
        for c in np.flatnonzero(~filled):
            far = int(d2[np.arange(len(x)), labels].argmax())
            new[c] = x[far]
            labels[far] = c
            d2[far, labels[far]] = 0.0
        shift = float(((new - centres) ** 2).sum())
        centres = new
        if shift <= tol:
            break
    d2 = _sq_dist(x, centres)
    labels = d2.argmin(axis=1)
    return centres, labels, float(d2[np.arange(len(x)), labels].sum())


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between the rows of `a` (n x d) and of `b` (m x d): n x m.

    One n x m array per dimension, added in dimension order: the same sums as reducing an
    n x m x d array over its last axis, without that array (a reduction over a short strided
    axis is several times slower)."""
    total = (a[:, 0, None] - b[None, :, 0]) ** 2
    for j in range(1, a.shape[1]):
        total += (a[:, j, None] - b[None, :, j]) ** 2
    return total


def silhouette(
    points: Any, labels: Any, *, sample_size: int | None = None, seed: int = 0
) -> float:
    """Mean silhouette coefficient (Euclidean), over a seeded random subset of `sample_size`.

    As scikit-learn's `silhouette_score`: the subset's points are scored against the subset
    only; a point alone in its cluster scores 0. Needs 2 <= clusters <= points - 1.
    """
    (score,) = silhouettes(points, [labels], sample_size=sample_size, seed=seed)
    if score is None:
        raise ValueError("silhouette needs 2 <= clusters <= n - 1 in the scored points")
    return score


def silhouettes(
    points: Any, labelings: list[Any], *, sample_size: int | None = None, seed: int = 0
) -> list[float | None]:
    """`silhouette` of each labeling of the same points, on the same seeded subset; None for
    a labeling whose subset holds fewer than 2 clusters or as many as its points.

    The distance matrix, the costly part, is computed once for all labelings (block by
    block), so k = 2..4 cost one silhouette's distances, not three.
    """
    x = np.asarray(points, dtype=float)
    labs = [np.asarray(lab) for lab in labelings]
    if sample_size is not None and sample_size < len(x):
        pick = np.random.default_rng(seed).choice(len(x), size=sample_size, replace=False)
        x, labs = x[pick], [lab[pick] for lab in labs]
    coded = [np.unique(lab, return_inverse=True) for lab in labs]
    valid = [2 <= len(groups) <= len(x) - 1 for groups, _ in coded]
    onehots = [_onehot(lab, len(groups)) for groups, lab in coded]
    # Sum of distances from each point to every cluster: a block of rows of the distance matrix
    # at a time (at most _BLOCK x n distances in memory) times each one-hot labeling (BLAS).
    sums = [np.empty((len(x), h.shape[1])) for h in onehots]
    for start in range(0, len(x), _BLOCK):
        block = x[start:start + _BLOCK]
        dist = np.sqrt(_sq_dist(block, x))
        for total, onehot in zip(sums, onehots, strict=True):
            total[start:start + _BLOCK] = dist @ onehot
    return [_mean_coefficient(total, lab) if ok else None
            for total, (_, lab), ok in zip(sums, coded, valid, strict=True)]


def _onehot(lab: np.ndarray, k: int) -> np.ndarray:
    onehot = np.zeros((len(lab), k))
    onehot[np.arange(len(lab)), lab] = 1.0
    return onehot


def _mean_coefficient(sums: np.ndarray, lab: np.ndarray) -> float:
    """Mean of (b - a) / max(a, b) from each point's summed distance to every cluster."""
    sizes = np.bincount(lab, minlength=sums.shape[1])
    rows = np.arange(len(lab))
    own = sizes[lab]
    a = sums[rows, lab] / np.maximum(own - 1, 1)  # self-distance is 0, so excluded by n-1
    means = sums / sizes[None, :]
    means[rows, lab] = np.inf
    b = means.min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(own > 1, (b - a) / np.maximum(a, b), 0.0)
    return float(np.nan_to_num(s).mean())


_BLOCK = 512
