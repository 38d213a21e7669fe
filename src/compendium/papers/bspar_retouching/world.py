r"""RetouchWorld: tinted digits, four global edits, a simulated human and a hackable proxy.

Every quantity is in JND units (one just-noticeable difference per attribute). An image's *look*
is a vector :math:`p \in \mathbb R^4` (exposure, contrast, saturation, temperature) of deviations
from the neutral rendering; the as-shot look :math:`p_0 = u` is drawn per image, and the hidden
per-image target is a small aesthetic offset :math:`\eta`, so the perceptual distance is
:math:`d(p) = \lVert p - \eta\rVert_2`.

Rendering (:func:`render`), with :math:`\hat L` the base's standardised luminance and
:math:`\hat C` its zero-mean chroma (unit RMS), :math:`v = (1, 0, -1)`:

.. math::  L' = 0.5 + E p_0 + S_L (1 + c\,p_1)\hat L,\quad
           C' = S_C (1 + s\,p_2)\hat C + T p_3 v,\quad I = L' + C'.

The policy sees five global statistics of :math:`I` (channel means, luminance std, chroma RMS),
which :func:`image_statistics` computes in closed form (:func:`image_statistics_rendered` is the
pixel reference the tests compare it with).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ATTRIBUTES = ("exposure", "contrast", "saturation", "temperature")
STEP_NAMES = ("-big", "-small", "+small", "+big")
NUM_ACTIONS = 4 * len(STEP_NAMES) + 1          # 16 edits + STOP
STOP = NUM_ACTIONS - 1
BIG, SMALL = 1.0, 0.2                           # JND; small steps are sub-threshold by construction
MICRO_ATTRIBUTES = (1, 2)                       # the proxy rewards small contrast / saturation edits
# rendering constants: what one JND of each attribute does to the pixels
EXPOSURE_GAIN, LUMA_STD, CONTRAST_GAIN = 0.04, 0.18, 0.12
CHROMA_RMS, SATURATION_GAIN, TEMPERATURE_GAIN = 0.08, 0.12, 0.02
TEMPERATURE_AXIS = np.array([1.0, 0.0, -1.0])
NUM_FEATURES = 5


def action_table() -> tuple[np.ndarray, np.ndarray]:
    """``(delta, micro)``: the look change of each action, shape (17, 4), and whether it is a
    micro-edit the proxy rewards, shape (17,)."""
    delta = np.zeros((NUM_ACTIONS, 4))
    micro = np.zeros(NUM_ACTIONS, bool)
    for a in range(4):
        for k, step in enumerate((-BIG, -SMALL, SMALL, BIG)):
            delta[4 * a + k, a] = step
            micro[4 * a + k] = (a in MICRO_ATTRIBUTES) and abs(step) == SMALL
    return delta, micro


@dataclass(frozen=True)
class World:
    """A set of images: normalised bases and their as-shot looks and hidden targets.

    Attributes
    ----------
    luma : ndarray, shape (n, 16, 16)
        Standardised luminance :math:`\\hat L` (mean 0, std 1 per image).
    chroma : ndarray, shape (n, 16, 16, 3)
        Zero-mean chroma :math:`\\hat C` (per-pixel channel mean 0, per-channel pixel mean 0, RMS 1).
    as_shot : ndarray, shape (n, 4)
        The starting look :math:`u` (JND).
    target : ndarray, shape (n, 4)
        The hidden aesthetic offset :math:`\\eta`; :math:`d = \\lVert p - \\eta\\rVert`.
    digit : ndarray, shape (n,)
        The digit class (not used by any method; for the figures).
    """

    luma: np.ndarray
    chroma: np.ndarray
    as_shot: np.ndarray
    target: np.ndarray
    digit: np.ndarray

    def __len__(self) -> int:
        return len(self.as_shot)

    def subset(self, index) -> "World":
        index = np.asarray(index)
        return World(self.luma[index], self.chroma[index], self.as_shot[index], self.target[index],
                     self.digit[index])


def normalise_bases(grey: np.ndarray, hue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tint grey glyphs and split them into standardised luminance and zero-mean chroma.

    Parameters
    ----------
    grey : ndarray, shape (n, 16, 16), values in [0, 1]
    hue : ndarray, shape (n,), radians: the glyph's tint (the paper takes the complementary tint)

    Returns
    -------
    luma : ndarray, shape (n, 16, 16)
    chroma : ndarray, shape (n, 16, 16, 3)
    """
    offsets = np.array([0.0, -2 * np.pi / 3, 2 * np.pi / 3])
    tint = 0.5 + 0.5 * np.cos(hue[:, None] + offsets)                       # (n, 3)
    # a bright glyph in its tint on a dark paper in the complementary tint
    rgb = 0.1 + 0.8 * grey[..., None] * tint[:, None, None, :] + 0.2 * (1 - grey[..., None]) * (1 - tint[:, None, None, :])
    lum = rgb.mean(-1)                                                       # (n, 16, 16)
    std = lum.std(axis=(1, 2), keepdims=True)
    luma = (lum - lum.mean(axis=(1, 2), keepdims=True)) / np.where(std > 0, std, 1.0)
    c = rgb - lum[..., None]
    c = c - c.mean(axis=(1, 2), keepdims=True)                               # per-channel pixel mean 0
    rms = np.sqrt((c ** 2).mean(axis=(1, 2, 3), keepdims=True))
    return luma, c / np.where(rms > 0, rms, 1.0)


def make_world(images: np.ndarray, digits: np.ndarray, rng: np.random.Generator, *, spread: float = 2.5,
               target_std: float = 0.3) -> World:
    """Tinted digits with random as-shot looks ``u ~ U(-spread, spread)^4`` and hidden targets
    ``eta ~ N(0, target_std^2)^4``.

    Parameters
    ----------
    images : ndarray, shape (n, 64)
        sklearn digits, grey levels 0..16 (loaded through :func:`compendium.data.load`).
    digits : ndarray, shape (n,)
    rng : numpy.random.Generator
    """
    if images.ndim != 2 or images.shape[1] != 64:
        raise ValueError(f"images must have shape (n, 64), got {images.shape}")
    grey = np.kron(images.reshape(-1, 8, 8) / 16.0, np.ones((2, 2)))         # (n, 16, 16)
    n = len(grey)
    luma, chroma = normalise_bases(grey, rng.uniform(0, 2 * np.pi, n))
    return World(luma=luma, chroma=chroma, as_shot=rng.uniform(-spread, spread, (n, 4)),
                 target=rng.normal(0.0, target_std, (n, 4)), digit=np.asarray(digits))


def render(luma: np.ndarray, chroma: np.ndarray, look: np.ndarray) -> np.ndarray:
    """The image at look ``p``: shape (n, 16, 16, 3) for ``look`` (n, 4) (unclipped)."""
    p = np.asarray(look, float)
    lum = 0.5 + EXPOSURE_GAIN * p[:, 0, None, None] + LUMA_STD * (1 + CONTRAST_GAIN * p[:, 1, None, None]) * luma
    c = CHROMA_RMS * (1 + SATURATION_GAIN * p[:, 2, None, None, None]) * chroma
    c = c + TEMPERATURE_GAIN * p[:, 3, None, None, None] * TEMPERATURE_AXIS
    return lum[..., None] + c


def _features(mean_rgb, luma_std, chroma_rms):
    """Scale the statistics so that one JND of an attribute moves a feature by about one."""
    return [(mean_rgb[..., 0] - 0.5) / EXPOSURE_GAIN, (mean_rgb[..., 1] - 0.5) / EXPOSURE_GAIN,
            (mean_rgb[..., 2] - 0.5) / EXPOSURE_GAIN, (luma_std / LUMA_STD - 1) / CONTRAST_GAIN,
            (chroma_rms / CHROMA_RMS - 1) / SATURATION_GAIN]


def image_statistics_rendered(images: np.ndarray) -> np.ndarray:
    """The policy's five features measured on pixels (reference), shape (n, 5)."""
    mean_rgb = images.mean(axis=(1, 2))
    lum = images.mean(-1)
    luma_std = lum.std(axis=(1, 2))
    c = images - lum[..., None]
    chroma_rms = np.sqrt((c ** 2).mean(axis=(1, 2, 3)))
    return np.stack(_features(mean_rgb, luma_std, chroma_rms), -1)


def image_statistics(look):
    """The same five features in closed form from the look alone (numpy or torch, shape (..., 4)).

    Because :math:`\\hat L` and :math:`\\hat C` are standardised, the statistics do not depend on the
    glyph: channel means :math:`0.5 + E p_0 + T p_3 v`, luminance std :math:`S_L |1 + c p_1|`, chroma
    RMS :math:`\\sqrt{S_C^2 (1 + s p_2)^2 + \\tfrac23 T^2 p_3^2}` (the cross term vanishes since
    :math:`\\hat C` has zero pixel mean per channel).
    """
    lib = torch if isinstance(look, torch.Tensor) else np
    p = look
    base = 0.5 + EXPOSURE_GAIN * p[..., 0]
    mean_rgb = lib.stack([base + TEMPERATURE_GAIN * p[..., 3], base, base - TEMPERATURE_GAIN * p[..., 3]], -1)
    luma_std = LUMA_STD * lib.abs(1 + CONTRAST_GAIN * p[..., 1])
    chroma_rms = lib.sqrt((CHROMA_RMS * (1 + SATURATION_GAIN * p[..., 2])) ** 2
                          + (2.0 / 3.0) * (TEMPERATURE_GAIN * p[..., 3]) ** 2)
    return lib.stack(_features(mean_rgb, luma_std, chroma_rms), -1)


def decode_look(features):
    """Invert :func:`image_statistics` (the heuristic planner reads the look this way)."""
    lib = torch if isinstance(features, torch.Tensor) else np
    f = features
    p0 = f[..., 1]
    p3 = (f[..., 0] - f[..., 2]) * EXPOSURE_GAIN / (2 * TEMPERATURE_GAIN)
    p1 = f[..., 3]
    chroma_rms = CHROMA_RMS * (1 + SATURATION_GAIN * f[..., 4])
    sat = lib.sqrt(lib.clip(chroma_rms ** 2 - (2.0 / 3.0) * (TEMPERATURE_GAIN * p3) ** 2, 1e-12, None))
    p2 = (sat / CHROMA_RMS - 1) / SATURATION_GAIN
    return lib.stack([p0, p1, p2, p3], -1)


def human_probability(d0, d_final, slope: float = 1.0):
    """The simulated rater: :math:`P(y = 1) = \\sigma(k (d_0 - d_K) / \\mathrm{JND})`."""
    x = slope * (d0 - d_final)
    return torch.sigmoid(x) if isinstance(x, torch.Tensor) else 1.0 / (1.0 + np.exp(-x))


def proxy_gain(d0, d_final, micro_edits, gamma: float):
    """The hackable dense proxy's total gain :math:`Q(I_K) - Q(I_0) = (d_0 - d_K) + \\gamma m`."""
    return (d0 - d_final) + gamma * micro_edits
