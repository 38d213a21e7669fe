"""A small DVS simulator and the event-set operations the chapter needs (numpy, vectorised).

The sensor tracks each pixel's log intensity on a fixed time grid and emits an event of polarity
+1 (ON) or -1 (OFF) each time the log intensity has moved by the contrast threshold ``C`` from the
pixel's reference level, which then moves by ``C`` (the ideal DVS pixel model). Events of one grid
step get timestamps spread evenly inside the step, then Gaussian jitter; uniform background
events and a few hot pixels (fixed positions on the sensor, same for every recording) are added.

Eight motion classes, in four time-reversed pairs: swipes right / left, down / up, a blob on a
circle clockwise / counter-clockwise, and a ring whose radius grows (zoom in) / shrinks (zoom out).
Each recording draws its centre, span or radius, blob size, brightness and duration at random, so
a class is a motion, not a template.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CLASSES", "PAIRS", "SensorSettings", "EventSet", "simulate", "sample_events", "merge_polarity",
           "shuffle_timestamps", "select_events", "quantise", "events_to_frames", "lookup_index"]

CLASSES = ("swipe right", "swipe left", "swipe down", "swipe up", "circle CW", "circle CCW", "zoom in", "zoom out")
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))        # time-reversed pairs


@dataclass(frozen=True)
class SensorSettings:
    """The simulator's fixed settings, chosen before any model was trained, except the background
    rate ``noise_events``, which sets the task's difficulty: the asset sets it per scale from its
    dev calibration (:class:`~compendium.papers.event2vec.asset.AssetSettings`)."""

    height: int = 32
    width: int = 32
    contrast: float = 0.2               # log-intensity threshold C
    steps: int = 48                     # grid steps of the log-intensity tracking
    step_ms: tuple = (1.0, 2.0)         # duration of one step, drawn per recording (speed)
    jitter_steps: float = 0.3           # timestamp jitter, in steps (Gaussian SD)
    noise_events: float = 1200.0        # mean background events per recording (Poisson); the asset sets it per scale
    hot_pixels: int = 2
    hot_events: float = 40.0            # mean events per hot pixel per recording (Poisson)
    max_crossings: int = 4              # events per pixel and step at most
    capacity: int = 1024                # events kept per recording (a uniform subset, time-sorted)


@dataclass
class EventSet:
    """Recordings as padded arrays, each row sorted by time.

    ``x, y, p`` (S, L) int16 (``p`` in {0, 1}: OFF, ON), ``t`` (S, L) float64 in ms, ``valid``
    (S, L) bool (a prefix of each row), ``label`` (S,) int64; ``height, width`` of the sensor.
    """

    x: np.ndarray
    y: np.ndarray
    t: np.ndarray
    p: np.ndarray
    valid: np.ndarray
    label: np.ndarray
    height: int
    width: int

    def __len__(self) -> int:
        return len(self.label)

    @property
    def counts(self) -> np.ndarray:
        return self.valid.sum(1)

    def subset(self, rows) -> "EventSet":
        return EventSet(self.x[rows], self.y[rows], self.t[rows], self.p[rows], self.valid[rows], self.label[rows],
                        self.height, self.width)


def _pack(rows, labels, height, width, capacity, rng) -> EventSet:
    """Keep at most ``capacity`` events per recording (uniform subset), sorted by time; pad."""
    S = len(rows)
    x = np.zeros((S, capacity), np.int16)
    y, p = np.zeros_like(x), np.zeros_like(x)
    t = np.zeros((S, capacity))
    valid = np.zeros((S, capacity), bool)
    for i, (ex, ey, et, ep) in enumerate(rows):
        keep = np.sort(rng.permutation(len(et))[:capacity]) if len(et) > capacity else np.arange(len(et))
        order = keep[np.argsort(et[keep], kind="stable")]
        k = len(order)
        x[i, :k], y[i, :k], t[i, :k], p[i, :k], valid[i, :k] = ex[order], ey[order], et[order], ep[order], True
    return EventSet(x, y, t, p, valid, np.asarray(labels, np.int64), height, width)


def _scene(labels, s, rng, H, W):
    """Intensity of every recording at normalised times ``s`` (T,): (S, T, H, W), background 1."""
    S = len(labels)
    yy, xx = np.mgrid[0:H, 0:W].astype(float)
    cx = W / 2 - 0.5 + rng.uniform(-3, 3, S)
    cy = H / 2 - 0.5 + rng.uniform(-3, 3, S)
    sigma = rng.uniform(1.5, 2.5, S)
    amp = rng.uniform(1.5, 3.0, S)
    span = rng.uniform(14, 20, S)
    radius = rng.uniform(7, 10, S)
    theta0 = rng.uniform(0, 2 * np.pi, S)
    turns = rng.uniform(0.75, 1.0, S)
    r_small, r_large = rng.uniform(1, 3, S), rng.uniform(10, 13, S)
    out = np.empty((S, len(s), H, W))
    for i, k in enumerate(labels):
        u = s - 0.5
        if k < 4:
            sign = 1 if k in (0, 2) else -1
            bx = cx[i] + (sign * u * span[i] if k < 2 else 0 * u)
            by = cy[i] + (sign * u * span[i] if k >= 2 else 0 * u)
            d2 = (xx[None] - bx[:, None, None]) ** 2 + (yy[None] - by[:, None, None]) ** 2
            shape = np.exp(-d2 / (2 * sigma[i] ** 2))
        elif k < 6:
            sign = 1 if k == 4 else -1          # CW in image coordinates (y down): angle increases
            ang = theta0[i] + sign * 2 * np.pi * turns[i] * s
            bx, by = cx[i] + radius[i] * np.cos(ang), cy[i] + radius[i] * np.sin(ang)
            d2 = (xx[None] - bx[:, None, None]) ** 2 + (yy[None] - by[:, None, None]) ** 2
            shape = np.exp(-d2 / (2 * sigma[i] ** 2))
        else:
            frac = s if k == 6 else 1 - s
            rho = r_small[i] + (r_large[i] - r_small[i]) * frac
            r = np.sqrt((xx - cx[i]) ** 2 + (yy - cy[i]) ** 2)
            shape = np.exp(-(r[None] - rho[:, None, None]) ** 2 / (2 * (0.6 * sigma[i]) ** 2))
        out[i] = 1.0 + amp[i] * shape
    return out


def hot_pixel_positions(settings: SensorSettings) -> np.ndarray:
    """The sensor's hot pixels ``(hot_pixels, 2)`` as (x, y): fixed by the sensor, not by the recording."""
    r = np.random.default_rng(20260)
    return np.stack([r.integers(0, settings.width, settings.hot_pixels),
                     r.integers(0, settings.height, settings.hot_pixels)], 1)


def simulate(labels, rng: np.random.Generator, settings: SensorSettings = SensorSettings(), batch: int = 64) -> EventSet:
    """Record one DVS event stream per label.

    Parameters
    ----------
    labels : array_like of int, shape (S,)
        Class indices into :data:`CLASSES`.
    rng : numpy.random.Generator
    settings : SensorSettings

    Returns
    -------
    EventSet
        At most ``settings.capacity`` events per recording (a uniform subset when more fired).
    """
    labels = np.asarray(labels, np.int64)
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= len(CLASSES))):
        raise ValueError(f"labels must be a 1-D array of class indices in [0, {len(CLASSES)})")
    H, W, C, T = settings.height, settings.width, settings.contrast, settings.steps
    hot = hot_pixel_positions(settings)
    rows = []
    s = np.linspace(0.0, 1.0, T + 1)
    for start in range(0, len(labels), batch):
        lab = labels[start:start + batch]
        logI = np.log(_scene(lab, s, rng, H, W))                     # (B, T+1, H, W)
        step_ms = rng.uniform(*settings.step_ms, len(lab))
        ref = logI[:, 0].copy()
        parts = []
        for k in range(1, T + 1):
            diff = logI[:, k] - ref
            n = np.minimum(np.floor(np.abs(diff) / C), settings.max_crossings).astype(int)
            b, yy, xx = np.nonzero(n)
            cnt = n[b, yy, xx]
            ref[b, yy, xx] += np.sign(diff[b, yy, xx]) * cnt * C      # the reference follows the crossings
            rep = np.repeat(np.arange(len(b)), cnt)
            j = np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)      # crossing index in its pixel
            frac = (j + 1) / cnt[rep]
            tk = (k - 1 + frac + settings.jitter_steps * rng.standard_normal(len(rep))) * step_ms[b[rep]]
            parts.append((b[rep], xx[rep], yy[rep], tk, (diff[b, yy, xx] > 0)[rep]))
        eb, ex, ey, et, ep = (np.concatenate([q[c] for q in parts]) for c in range(5))
        order = np.argsort(eb, kind="stable")
        bounds = np.searchsorted(eb[order], np.arange(len(lab) + 1))
        for i in range(len(lab)):
            sel = order[bounds[i]:bounds[i + 1]]
            dur = T * step_ms[i]
            m = rng.poisson(settings.noise_events)                   # background activity
            nx, ny = rng.integers(0, W, m), rng.integers(0, H, m)
            nt, npol = rng.uniform(0, dur, m), rng.random(m) < 0.5
            hc = rng.poisson(settings.hot_events, len(hot))           # hot pixels
            hx, hy = np.repeat(hot[:, 0], hc), np.repeat(hot[:, 1], hc)
            ht, hpol = rng.uniform(0, dur, hc.sum()), rng.random(hc.sum()) < 0.5
            rows.append((np.concatenate([ex[sel], nx, hx]), np.concatenate([ey[sel], ny, hy]),
                         np.concatenate([et[sel], nt, ht]), np.concatenate([ep[sel], npol, hpol]).astype(np.int16)))
    return _pack(rows, labels, H, W, settings.capacity, rng)


def sample_events(data: EventSet, n: int, rng: np.random.Generator) -> EventSet:
    """``n`` events per recording drawn uniformly without replacement and re-sorted by time
    (fewer if a recording has fewer; the rest is padding)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    keys = np.where(data.valid, rng.random(data.valid.shape), np.inf)
    if n < keys.shape[1]:
        idx = np.argpartition(keys, n - 1, axis=1)[:, :n]             # the n smallest keys: a uniform subset
    else:
        idx = np.broadcast_to(np.arange(keys.shape[1]), keys.shape)
    idx = np.sort(idx, axis=1)                                      # rows are time-sorted: index order = time order
    valid = np.take_along_axis(data.valid, idx, 1)                  # valid slots are a prefix, so they come first
    take = lambda a: np.take_along_axis(a, idx, 1)
    return EventSet(take(data.x), take(data.y), take(data.t), take(data.p), valid, data.label, data.height, data.width)


def merge_polarity(data: EventSet) -> EventSet:
    """The polarity-merged copy: every event gets p = 0."""
    return EventSet(data.x, data.y, data.t, np.zeros_like(data.p), data.valid, data.label, data.height, data.width)


def shuffle_timestamps(data: EventSet, rng: np.random.Generator) -> EventSet:
    """Permute the events of each recording in time: the sorted timestamps stay, the (x, y, p)
    they carry are shuffled among them, so the order of events is random."""
    keys = np.where(data.valid, rng.random(data.valid.shape), np.inf)
    perm = np.argsort(keys, axis=1)
    take = lambda a: np.take_along_axis(a, perm, 1)
    return EventSet(take(data.x), take(data.y), data.t, take(data.p), data.valid, data.label, data.height, data.width)


def select_events(data: EventSet, keep: np.ndarray) -> EventSet:
    """Keep the events where ``keep`` (S, L) is true (time order kept, compacted to a prefix)."""
    keep = keep & data.valid
    order = np.argsort(~keep, axis=1, kind="stable")
    take = lambda a: np.take_along_axis(a, order, 1)
    return EventSet(take(data.x), take(data.y), take(data.t), take(data.p), take(keep), data.label,
                    data.height, data.width)


def quantise(data: EventSet, size: int) -> EventSet:
    """Coordinates on a ``size x size`` grid (integer division of the sensor's coordinates)."""
    if data.height % size or data.width % size:
        raise ValueError(f"size {size} must divide the sensor size {data.height}x{data.width}")
    fy, fx = data.height // size, data.width // size
    return EventSet((data.x // fx).astype(np.int16), (data.y // fy).astype(np.int16), data.t, data.p, data.valid,
                    data.label, size, size)


def lookup_index(x, y, p, height: int, width: int):
    """The lookup-table row of an event: ``p * H * W + y * W + x + 1`` (row 0 is the pad)."""
    return p * height * width + y * width + x + 1


def events_to_frames(data: EventSet, bins: int, polarities: int = 2) -> np.ndarray:
    """Event counts per (polarity, time bin, y, x): (S, polarities * bins, H, W) float32.

    Time is normalised per recording to [0, 1] (first to last event) and cut into ``bins``.
    """
    S, L = data.valid.shape
    t0 = data.t[:, :1]
    span = np.where(data.valid, data.t - t0, -np.inf).max(1, keepdims=True)
    tn = (data.t - t0) / np.where(span > 0, span, 1.0)
    b = np.clip((tn * bins).astype(int), 0, bins - 1)
    pol = np.minimum(data.p.astype(int), polarities - 1)
    ch = pol * bins + b
    flat = ((np.arange(S)[:, None] * polarities * bins + ch) * data.height + data.y) * data.width + data.x
    counts = np.bincount(flat[data.valid], minlength=S * polarities * bins * data.height * data.width)
    return counts.reshape(S, polarities * bins, data.height, data.width).astype(np.float32)
