"""Feature statistics in LeRobot's form: per episode (meta/episodes) and over the dataset (meta/stats.json).

Each feature gets min, max, mean, std, count and the quantiles q01 q10 q50 q90 q99. Vectors are reduced over
frames (stats have the feature's shape); images over frames and pixels, per channel, scaled to [0, 1] (stats have
shape (C, 1, 1)). Dataset stats combine the episodes' exactly for count, min, max, mean and std, and as the
count-weighted mean of their quantiles, as LeRobot itself does. NaN (an unknown ``progress``) is left out.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["QUANTILES", "aggregate_stats", "episode_stats"]

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
_MAX_IMAGE_FRAMES = 32  # frames sampled per episode for image stats
_MAX_IMAGE_PIXELS = 20_000  # pixels per channel per episode, after striding

Stats = dict[str, np.ndarray]


def _image_samples(images: np.ndarray) -> np.ndarray:
    """(n, H, W, C) uint8 -> (samples, C) float in [0, 1], a strided subset that keeps stats cheap."""
    n, height, width, channels = images.shape
    frames = images[np.linspace(0, n - 1, min(n, _MAX_IMAGE_FRAMES)).round().astype(int)]
    per_frame = max(1, _MAX_IMAGE_PIXELS // len(frames))
    stride = max(1, int(np.sqrt(height * width / per_frame)))
    pixels = frames[:, ::stride, ::stride].reshape(-1, channels)
    return pixels.astype(np.float64) / 255.0


def episode_stats(values: np.ndarray, image: bool) -> Stats:
    """Stats of one episode's (n, ...) values; ``image`` for (n, H, W, C) uint8."""
    n = len(values)
    if image:
        samples = _image_samples(values)
        shape: tuple[int, ...] = (values.shape[-1], 1, 1)
    else:
        samples = values.reshape(n, -1).astype(np.float64)
        shape = (samples.shape[1],)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        out = {
            "min": np.nanmin(samples, axis=0),
            "max": np.nanmax(samples, axis=0),
            "mean": np.nanmean(samples, axis=0),
            "std": np.nanstd(samples, axis=0),
        }
        quantiles = np.nanquantile(samples, list(QUANTILES.values()), axis=0)
    out.update({name: q for name, q in zip(QUANTILES, quantiles, strict=True)})
    result = {k: np.nan_to_num(v, nan=0.0).reshape(shape) for k, v in out.items()}
    result["count"] = np.array([n], dtype=np.int64)
    return result


def aggregate_stats(per_episode: list[Stats]) -> Stats:
    """Dataset stats of one feature from its episodes' stats."""
    counts = np.array([float(s["count"][0]) for s in per_episode])
    total = counts.sum()
    weights = (counts / total).reshape(-1, *([1] * per_episode[0]["mean"].ndim))
    means = np.stack([s["mean"] for s in per_episode])
    stds = np.stack([s["std"] for s in per_episode])
    mean = (weights * means).sum(axis=0)
    variance = (weights * (stds**2 + (means - mean) ** 2)).sum(axis=0)
    out: Stats = {
        "min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
        "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(np.maximum(variance, 0.0)),
        "count": np.array([int(total)], dtype=np.int64),
    }
    for name in QUANTILES:
        out[name] = (weights * np.stack([s[name] for s in per_episode])).sum(axis=0)
    return out
