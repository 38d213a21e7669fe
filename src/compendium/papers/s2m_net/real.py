"""Adapters that turn real images shipped inside installed packages into ``.data`` / ``.target``.

They are the manifest's loaders (``data/manifest.yaml``): the chapter calls
``compendium.data.load``, which runs one of these and checks the checksum of what it returns.
``data`` is the stacked uint8 images, ``target`` the image index.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

__all__ = ["sklearn_sample_photos", "skimage_retina", "skimage_camera", "grey"]


def _pack(images) -> SimpleNamespace:
    data = np.ascontiguousarray(np.stack([np.asarray(im) for im in images]))
    if data.dtype != np.uint8:
        raise ValueError(f"expected uint8 images, got {data.dtype}")
    return SimpleNamespace(data=data, target=np.arange(len(data), dtype=np.int64))


def sklearn_sample_photos() -> SimpleNamespace:
    """scikit-learn's two bundled photographs (china.jpg, flower.jpg): (2, 427, 640, 3) uint8.

    Read from the package's ``datasets/images`` folder with Pillow, as ``load_sample_images``
    does (same arrays; the manifest's checksum confirms it on every load)."""
    import importlib.util
    from pathlib import Path

    from PIL import Image

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("scikit-learn is not installed: its sample photographs are unavailable")
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "images"
    return _pack([np.asarray(Image.open(folder / name)) for name in ("china.jpg", "flower.jpg")])


def skimage_retina() -> SimpleNamespace:
    """scikit-image's colour fundus photograph of a human retina: (1, 1411, 1411, 3) uint8."""
    from skimage import data

    return _pack([data.retina()])


def skimage_camera() -> SimpleNamespace:
    """scikit-image's 'cameraman' test image: (1, 512, 512) uint8."""
    from skimage import data

    return _pack([data.camera()])


def grey(image) -> np.ndarray:
    """Luminance in [0, 1] (Rec. 601 weights) of an RGB uint8 image; a grey image is scaled only."""
    x = np.asarray(image, dtype=float) / 255.0
    return x @ np.array([0.299, 0.587, 0.114]) if x.ndim == 3 else x
