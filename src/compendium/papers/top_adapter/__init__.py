"""TopAdapter (ICML 2026, seed ``002_d926b147087f7228.txt``, abstract 16): topological primitives
injected into a frozen point-cloud transformer. WORK IN PROGRESS: only the point-cloud primitives
(``points``) and the zero-initialised trainable modules (``adapter``) have landed; no notebook, registry block, backbone asset or experiment yet.

No paper text or code was available: everything here is inferred from the abstract, and the
chapter will test "topological primitives in a frozen transformer", not the authors' generator.
"""

from .adapter import GeometricController, TopoTransfer
from .points import fps, group, random_se3, sample_shape, SHAPES, simplex_features, triangle_area

__all__ = ["GeometricController", "TopoTransfer", "fps", "group", "random_se3", "sample_shape", "SHAPES", "simplex_features", "triangle_area"]
