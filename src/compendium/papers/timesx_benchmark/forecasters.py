"""Forecasters of TimesX-mini: seasonal naive, Holt-Winters (statsmodels), a global MLP, a
bag-of-words context model, an oracle parser and the ensembles.

Ours: seasonal naive (one line), the MLP (a stand-in for a time-series foundation model, trained
with ``compendium.training``), the date parser and the ensembles. Holt-Winters is statsmodels'
``ExponentialSmoothing``; the bag-of-words regression is scikit-learn's ``CountVectorizer`` +
``PolynomialFeatures`` (pairwise word interactions, because an effect is sign times magnitude) +
``Ridge``.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from compendium.training import TrainSpec, fit, seeded_init, torch_threads

from .generator import HORIZON, INPUT, event_sentence, parse_dates


def seasonal_naive(history: np.ndarray, periods: np.ndarray, horizon: int = HORIZON) -> np.ndarray:
    """Repeat the last season: ``yhat[h] = y[o - m + (h mod m)]``. history (N, o) -> (N, horizon)."""
    o = history.shape[1]
    h = np.arange(horizon)
    idx = o - periods[:, None] + (h[None, :] % periods[:, None])
    return np.take_along_axis(history, idx.astype(int), axis=1)


def holt_winters(history: np.ndarray, periods: np.ndarray, horizon: int = HORIZON) -> tuple[np.ndarray, int]:
    """statsmodels Holt-Winters (additive trend and season, least-squares fit) per series.

    Returns forecasts (N, horizon) and the number of series where the fit failed and seasonal
    naive was used instead.
    """
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    out, failures = np.empty((history.shape[0], horizon)), 0
    for i, (y, m) in enumerate(zip(history, periods)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = ExponentialSmoothing(y, trend="add", seasonal="add", seasonal_periods=int(m),
                                             initialization_method="heuristic")
                f = model.fit(method="least_squares", use_brute=False).forecast(horizon)
            if not np.all(np.isfinite(f)):
                raise FloatingPointError
            out[i] = f
        except Exception:  # noqa: BLE001 - any failed fit falls back, and is counted
            out[i] = seasonal_naive(y[None, :], np.array([m]), horizon)[0]
            failures += 1
    return out, failures


def windows_from(series: np.ndarray, origins: list[int], length: int = INPUT, horizon: int = HORIZON):
    """Input/target pairs ``(y[o-L:o], y[o:o+H])`` for every series and origin, scaled by the input mean.

    Returns X (n, L), Y (n, H), scale (n,), target_end (n,) (one past the last target index, for the audit).
    """
    X, Y, ends = [], [], []
    for o in origins:
        X.append(series[:, o - length:o])
        Y.append(series[:, o:o + horizon])
        ends.append(np.full(series.shape[0], o + horizon))
    X, Y, ends = np.concatenate(X), np.concatenate(Y), np.concatenate(ends)
    scale = X.mean(axis=1)
    return X / scale[:, None], Y / scale[:, None], scale, ends


class GlobalMLP(torch.nn.Module):
    """Scaled last ``INPUT`` values -> scaled next ``HORIZON`` values (one model for all series)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(INPUT, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, HORIZON))

    def forward(self, x):  # (B, L) -> (B, H); a residual on the last-season mean keeps it stable
        return self.net(x) + x[:, -HORIZON:].mean(dim=1, keepdim=True)


def train_global_mlp(X: np.ndarray, Y: np.ndarray, *, hidden: int, steps: int, seed: int,
                     batch_size: int = 256) -> GlobalMLP:
    """Fit the global MLP with an L1 loss (AdamW, cosine schedule, one thread)."""
    with seeded_init(seed):
        model = GlobalMLP(hidden)
    Xt, Yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    rng = np.random.default_rng(seed)
    spec = TrainSpec(max_steps=steps, learning_rate=3e-3, weight_decay=1e-4, schedule="cosine",
                     warmup_steps=20, grad_clip=1.0, threads=1)

    def loss(step):
        idx = torch.as_tensor(rng.integers(0, len(Xt), batch_size))
        return (model(Xt[idx]) - Yt[idx]).abs().mean()

    fit(model, loss, spec)
    return model.eval()


def mlp_forecast(model: GlobalMLP, history: np.ndarray) -> np.ndarray:
    """Forecast (N, H) from histories (N, o >= INPUT)."""
    x = history[:, -INPUT:]
    scale = x.mean(axis=1, keepdims=True)
    with torch.no_grad(), torch_threads(1):
        out = model(torch.as_tensor(x / scale, dtype=torch.float32)).numpy().astype(np.float64)
    return out * scale


def memorising_forecast(model: GlobalMLP, memory_X: np.ndarray, memory_Y: np.ndarray, history: np.ndarray,
                        tol: float = 1e-9) -> np.ndarray:
    """A memorising twin of ``model``: where the scaled input equals a stored window (max abs difference
    at most ``tol``), return that window's stored target; elsewhere the model's forecast."""
    out = mlp_forecast(model, history)
    if len(memory_X) == 0:
        return out
    x = history[:, -INPUT:]
    scale = x.mean(axis=1, keepdims=True)
    dist = np.abs((x / scale)[:, None, :] - memory_X[None, :, :]).max(axis=2)
    hit = dist.min(axis=1) <= tol
    out[hit] = memory_Y[dist[hit].argmin(axis=1)] * scale[hit]
    return out


class ContextModel:
    """Bag-of-words regression of the event's log-multiplier; the parser places it on the stated steps."""

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def fit(self, texts: list[str], log_multipliers: np.ndarray) -> "ContextModel":
        """Learn from training contexts and the measured log-ratio on their stated steps (n,)."""
        from sklearn.feature_extraction.text import CountVectorizer
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import PolynomialFeatures

        sentences = [event_sentence(t) for t in texts]
        self.pipeline = make_pipeline(CountVectorizer(binary=True, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z-]+\b"),
                                      PolynomialFeatures(2, interaction_only=True, include_bias=False),
                                      Ridge(alpha=self.alpha))
        self.pipeline.fit(sentences, log_multipliers)
        return self

    def effect(self, texts: list[str]) -> np.ndarray:
        """Predicted log-multiplier per text (n,)."""
        return self.pipeline.predict([event_sentence(t) for t in texts])

    def log_multipliers(self, texts: list[str], horizon: int = HORIZON) -> np.ndarray:
        """(n, horizon): the predicted effect on the steps the parser reads from each text."""
        effect, out = self.effect(texts), np.zeros((len(texts), horizon))
        for i, text in enumerate(texts):
            parsed = parse_dates(event_sentence(text))
            if parsed is None:
                continue
            start, duration = parsed
            out[i, max(start, 0):min(start + duration, horizon)] = effect[i]
        return out


def context_adjusted(base: np.ndarray, log_multipliers: np.ndarray) -> np.ndarray:
    """The unimodal forecast times the context's multipliers."""
    return base * np.exp(log_multipliers)


def mean_ensemble(*forecasts: np.ndarray) -> np.ndarray:
    return np.mean(np.stack(forecasts), axis=0)


def median_ensemble(*forecasts: np.ndarray) -> np.ndarray:
    return np.median(np.stack(forecasts), axis=0)
