"""TimesX-mini: seeded series over five domains, templated contexts, realism knobs, a leakage audit.

Every series lives on one global clock ``t = 0 .. LENGTH - 1`` with a global cutoff ``CUTOFF``:
values at ``t < CUTOFF`` are *pre-cutoff* (a model may train on them), the evaluation window of a
benchmark series forecasts ``t = CUTOFF .. CUTOFF + HORIZON - 1`` from the history before it.
Benchmark histories carry no context events, so the unimodal forecasts of a series are the same in
every variant of a replicate; the variants differ only in what happens inside the horizon and in
what the context says (common random numbers: one set of draws per replicate, mapped through the
knobs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from compendium import data

LENGTH, CUTOFF, HORIZON, INPUT = 132, 120, 12, 48
DEV_ORIGIN = CUTOFF - HORIZON
DOMAINS = ("retail", "energy", "web", "temperature", "real")
PERIODS = {"retail": 7, "energy": 24, "web": 7, "temperature": 12, "real": 12}
UNITS = {"retail": "units sold", "energy": "megawatt-hours", "web": "page views",
         "temperature": "degrees Celsius", "real": "index points"}
FREQUENCIES = {"retail": "daily", "energy": "hourly", "web": "daily", "temperature": "monthly", "real": "monthly"}
REAL_SETS = ("statsmodels_co2_monthly", "statsmodels_elnino_monthly", "statsmodels_elec_equip_monthly")


@dataclass(frozen=True)
class Knobs:
    """Realism knobs of one benchmark variant.

    ``p_relevant``: the stated event happens as stated; ``p_misleading``: an event is stated but has
    no effect (capped at ``1 - p_relevant``); the rest see a distractor sentence and no event.
    ``date_noise``: share of stated start dates off by 1 or 2 steps; ``heldout_share``: share of
    test contexts written with held-out paraphrase templates and words.
    """

    p_relevant: float
    p_misleading: float
    date_noise: float
    heldout_share: float

    def __post_init__(self):
        for name in ("p_relevant", "p_misleading", "date_noise", "heldout_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"Knobs.{name} must lie in [0, 1], got {value}")


CLEAN = Knobs(p_relevant=1.0, p_misleading=0.0, date_noise=0.0, heldout_share=0.0)


def templates() -> dict:
    """The authored templates (``data/timesx_templates.json``, checksum-verified)."""
    return json.loads(data.load("timesx_templates").read_text(encoding="utf-8"))


def real_series() -> list[np.ndarray]:
    """The three real monthly series (statsmodels), each verified against the manifest."""
    return [data.load(name).data for name in REAL_SETS]


def make_series(domains: np.ndarray, rng: np.random.Generator, real: list[np.ndarray]) -> np.ndarray:
    """Positive series of length ``LENGTH``, one row per entry of ``domains``.

    Synthetic domains: ``level * (1 + slope t) * (1 + s(t)) * exp(sigma_t e_t)`` with ``s`` two
    harmonics of the domain period plus a slow cycle of four periods, AR(1) noise ``e`` and a
    heteroscedastic scale ``sigma_t = sigma0 (1 + 2 max(s(t), 0))``. Domain ``real``: a random
    segment of one of the real series, rescaled to a random level. Returns shape (N, LENGTH).
    """
    n = len(domains)
    t = np.arange(LENGTH)
    period = np.array([PERIODS[d] for d in domains], dtype=float)[:, None]
    level = np.exp(rng.uniform(np.log(20), np.log(500), (n, 1)))
    slope = rng.uniform(-0.001, 0.003, (n, 1))
    a1, a2, a3 = rng.uniform(0.1, 0.35, (n, 1)), rng.uniform(0.0, 0.15, (n, 1)), rng.uniform(0.0, 0.1, (n, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 3))
    season = (a1 * np.sin(2 * np.pi * t / period + phase[:, :1]) + a2 * np.sin(4 * np.pi * t / period + phase[:, 1:2])
              + a3 * np.sin(2 * np.pi * t / (4 * period) + phase[:, 2:]))
    sigma = rng.uniform(0.03, 0.08, (n, 1)) * (1 + 2 * np.maximum(season, 0))
    eps = rng.standard_normal((n, LENGTH))
    for k in range(1, LENGTH):  # AR(1) innovations, phi = 0.4
        eps[:, k] = 0.4 * eps[:, k - 1] + np.sqrt(1 - 0.4**2) * eps[:, k]
    y = level * (1 + slope * t) * (1 + season) * np.exp(sigma * eps)
    picks = rng.integers(0, len(real), n)
    starts = rng.random(n)
    for i in np.flatnonzero(np.asarray(domains) == "real"):
        source = real[picks[i]]
        offset = int(starts[i] * (source.size - LENGTH))
        segment = source[offset:offset + LENGTH]
        y[i] = level[i, 0] * segment / segment.mean()
    return y


@dataclass(frozen=True)
class EventDraws:
    """Per-window draws shared by every variant of a replicate (common random numbers), shape (N,)."""

    event_index: np.ndarray   # which of the domain's three events
    strong: np.ndarray        # magnitude class: strong (True) or moderate
    start: np.ndarray         # true start step inside the horizon
    duration: np.ndarray      # 2..4 steps
    u_relevant: np.ndarray    # uniform: relevant / misleading / distractor
    u_date: np.ndarray        # uniform: is the stated date noisy
    shift: np.ndarray         # -2, -1, 1, 2
    u_heldout: np.ndarray     # uniform: held-out paraphrase
    template: np.ndarray      # integer, reduced modulo the template count
    word: np.ndarray          # integer, synonym choice
    ago: np.ndarray           # steps since a past (unscheduled) event, 3..30
    lead: np.ndarray          # steps between announcement and origin, 1..10


def draw_events(n: int, rng: np.random.Generator) -> EventDraws:
    duration = rng.integers(2, 5, n)
    return EventDraws(
        event_index=rng.integers(0, 3, n), strong=rng.random(n) < 0.5,
        start=(rng.random(n) * (HORIZON - duration + 1)).astype(int), duration=duration,
        u_relevant=rng.random(n), u_date=rng.random(n), shift=rng.choice([-2, -1, 1, 2], n),
        u_heldout=rng.random(n), template=rng.integers(0, 1000, n), word=rng.integers(0, 1000, n),
        ago=rng.integers(3, 31, n), lead=rng.integers(1, 11, n))


@dataclass(frozen=True)
class Window:
    """One evaluation window as the protocol exposes it: what a forecaster may see at ``origin``.

    ``history_end``: one past the last visible series index; ``items``: context items, each a dict
    with ``announced_at``, ``event_start`` and ``scheduled`` (events after the origin are allowed
    only when scheduled, and are flagged).
    """

    series: int
    origin: int
    history_end: int
    text: str
    items: tuple = field(default_factory=tuple)


@dataclass(frozen=True)
class Contexts:
    """Contexts of one variant: texts, the stated event, the truth, and the audit view."""

    texts: list
    stated_log_multiplier: np.ndarray  # (N, H): what the text says, parsed perfectly (oracle)
    true_log_multiplier: np.ndarray    # (N, H): what happens
    kind: np.ndarray                   # (N,) "relevant" / "misleading" / "distractor"
    heldout: np.ndarray                # (N,) bool
    windows: list


def _mask(start: np.ndarray, duration: np.ndarray) -> np.ndarray:
    h = np.arange(HORIZON)
    return ((h >= start[:, None]) & (h < (start + duration)[:, None])).astype(float)


def make_contexts(domains: np.ndarray, draws: EventDraws, knobs: Knobs, tpl: dict, origin: int = CUTOFF,
                  permutation: np.ndarray | None = None) -> Contexts:
    """Render the contexts of one variant and the multipliers they state and cause.

    ``permutation`` (the negative control) gives series ``i`` the context written for series
    ``permutation[i]`` while the truth stays that of series ``i``.
    """
    n = len(domains)
    p_mis = min(knobs.p_misleading, 1.0 - knobs.p_relevant)
    kind = np.where(draws.u_relevant < knobs.p_relevant, "relevant",
                    np.where(draws.u_relevant < knobs.p_relevant + p_mis, "misleading", "distractor"))
    heldout = draws.u_heldout < knobs.heldout_share
    noisy = draws.u_date < knobs.date_noise
    stated_start = np.clip(np.where(noisy, draws.start + draws.shift, draws.start), 0, HORIZON - draws.duration)
    sign = np.array([tpl["events"][d][k][1] for d, k in zip(domains, draws.event_index)], dtype=float)
    size = np.where(draws.strong, tpl["magnitudes"]["strong"]["log_multiplier"],
                    tpl["magnitudes"]["moderate"]["log_multiplier"])
    has_event = kind != "distractor"
    stated = (sign * size)[:, None] * _mask(stated_start, draws.duration) * has_event[:, None]
    true = (sign * size)[:, None] * _mask(draws.start, draws.duration) * (kind == "relevant")[:, None]
    texts, windows = [], []
    for i in range(n):
        d, split = domains[i], ("heldout" if heldout[i] else "train")
        name, _, event_kind, synonym = tpl["events"][d][draws.event_index[i]]
        event_word = synonym if heldout[i] else name
        mag_words = tpl["magnitudes"]["strong" if draws.strong[i] else "moderate"][split]
        pick = lambda key: tpl[key][split][draws.template[i] % len(tpl[key][split])]  # noqa: E731
        fill = dict(domain=d, unit=UNITS[d], frequency=FREQUENCIES[d], event=event_word,
                    magnitude=mag_words[draws.word[i] % len(mag_words)], start=int(stated_start[i]),
                    duration=int(draws.duration[i]), ago=int(draws.ago[i]))
        past_name = tpl["events"][d][(draws.event_index[i] + 1) % 3]
        fill_past = dict(fill, event=past_name[3] if heldout[i] else past_name[0])
        sentences = [pick("metadata").format(**fill), pick("past").format(**fill_past)]
        items = [dict(what="metadata", announced_at=0, event_start=None, scheduled=False),
                 dict(what="past event", announced_at=origin - int(draws.ago[i]) + 1,
                      event_start=origin - int(draws.ago[i]), scheduled=False)]
        if has_event[i]:
            sentences.append(pick("event").format(**fill))
            items.append(dict(what=f"{event_kind} event", announced_at=origin - int(draws.lead[i]),
                              event_start=origin + int(stated_start[i]), scheduled=True))
        else:
            sentences.append(pick("distractor").format(**fill))
            items.append(dict(what="distractor", announced_at=origin - int(draws.lead[i]), event_start=None,
                              scheduled=False))
        texts.append(" ".join(sentences))
        windows.append(Window(series=i, origin=origin, history_end=origin, text=texts[-1], items=tuple(items)))
    if permutation is not None:
        texts = [texts[j] for j in permutation]
        stated = stated[permutation]
        windows = [Window(w.series, w.origin, w.history_end, texts[w.series], windows[permutation[w.series]].items)
                   for w in windows]
    return Contexts(texts, stated, true, kind, heldout, windows)


def leakage_audit(windows: list[Window]) -> list[tuple[int, str]]:
    """Every way a window lets information from after its origin through.

    A window leaks when its visible history reaches past the origin, when a context item was
    announced after the origin, or when an item describes an event after the origin that was not
    scheduled in advance. Scheduled future events (calendar days, announced campaigns) are allowed.

    Returns
    -------
    list of (series, reason)
        Empty when no window leaks.
    """
    problems = []
    for w in windows:
        if w.history_end > w.origin:
            problems.append((w.series, f"history visible up to t = {w.history_end - 1} >= origin {w.origin}"))
        for item in w.items:
            if item["announced_at"] > w.origin:
                problems.append((w.series, f"{item['what']} announced at {item['announced_at']} after the origin"))
            start = item["event_start"]
            if start is not None and start >= w.origin and not item["scheduled"]:
                problems.append((w.series, f"unscheduled {item['what']} at {start} after the origin"))
    return problems


def scheduled_future_items(windows: list[Window]) -> int:
    """Number of flagged (scheduled) context items that describe an event after the origin."""
    return sum(1 for w in windows for it in w.items
               if it["event_start"] is not None and it["event_start"] >= w.origin and it["scheduled"])


_NUMBER = re.compile(r"\d+")


def parse_dates(text: str) -> tuple[int, int] | None:
    """The context model's date parser: the first two integers of the event sentence, read as
    (start, duration). Held-out templates that put the duration first defeat it, by design."""
    numbers = [int(x) for x in _NUMBER.findall(text)]
    if len(numbers) < 2:
        return None
    return numbers[0], numbers[1]


def event_sentence(text: str) -> str:
    """The context without its metadata and past-event sentences (the first two)."""
    parts = re.split(r"(?<=[.;])\s+(?=[A-Z])", text)
    return " ".join(parts[2:]) if len(parts) > 2 else ""


def planted_leaky_windows(origin: int = CUTOFF) -> list[Window]:
    """Three windows that each leak one way (the audit must catch all three)."""
    ok_items = (dict(what="metadata", announced_at=0, event_start=None, scheduled=False),)
    return [
        Window(0, origin, origin + 1, "history one step past the origin", ok_items),
        Window(1, origin, origin, "a report published after the origin",
               ok_items + (dict(what="news report", announced_at=origin + 2, event_start=origin - 1, scheduled=False),)),
        Window(2, origin, origin, "an unscheduled outage after the origin, announced in time",
               ok_items + (dict(what="outage", announced_at=origin, event_start=origin + 3, scheduled=False),)),
    ]
