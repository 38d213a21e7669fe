"""Token mixers (SSTM, its ungated FNO-style ablation, self-attention) and the small U-Net they sit in.

Shapes follow ``(B, C, H, W)`` throughout. FLOPs are counted per image as 2 x multiply-adds of the
convolutions and matrix products, plus ``2.5 N log2 N`` per real 2-D FFT of ``N = HW`` points per
channel (half the ``5 N log2 N`` of a complex one); element-wise operations (activations,
normalisation, the gate product) are left out.
"""

from __future__ import annotations

import math

import sympy
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MIXERS", "SpectralMixer", "SpatialGate", "SSTMBlock", "FNOBlock", "SelfAttention2d", "ConvBlock",
           "TinyUNet", "make_mixer", "parameter_count", "count_flops", "flops_attention", "flops_sstm",
           "flop_ratio_symbolic", "corner_gradient"]

MIXERS = ("none", "attention", "fno", "sstm")


def _fft_flops(h: int, w: int, channels: int) -> float:
    n = h * w
    return 2.5 * n * math.log2(n) * channels


class SpectralMixer(nn.Module):
    r"""Truncated spectral filter: :math:`x \mapsto \mathrm{irfft2}(W \odot P_K\,\mathrm{rfft2}(x))`.

    :math:`P_K` keeps the rfft2 modes with row frequency :math:`k_y \in [-K/2, K/2)` and column
    frequency :math:`0 \le k_x \le K/2` (the centred K x K low-frequency block, stored in rfft
    layout) and zeroes the rest; :math:`W \in \mathbb{C}^{C \times K \times (K/2+1)}` is learnable.
    With ``K = H = W`` and ``W = 1`` the map is the identity (``ortho`` normalisation).

    Parameters
    ----------
    channels : int
    modes : int
        K, even, at most the smaller spatial side of the input.
    """

    def __init__(self, channels: int, modes: int):
        super().__init__()
        if modes < 2 or modes % 2:
            raise ValueError(f"modes must be an even integer >= 2, got {modes}")
        self.channels, self.modes = channels, modes
        weight = torch.zeros(channels, modes, modes // 2 + 1, 2)
        weight[..., 0] = 1.0
        self.weight = nn.Parameter(weight + 0.02 * torch.randn_like(weight))

    def set_identity(self) -> "SpectralMixer":
        """Set W = 1 (tests: with full K the mixer is then the identity)."""
        with torch.no_grad():
            self.weight.zero_()
            self.weight[..., 0] = 1.0
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        K, h = self.modes, self.modes // 2
        if K > H or K > W:
            raise ValueError(f"SpectralMixer with modes {K} needs inputs of at least {K} x {K}, got {H} x {W}")
        X = torch.fft.rfft2(x, norm="ortho")                         # (B, C, H, W//2+1) complex
        w = torch.view_as_complex(self.weight)                       # (C, K, K/2+1)
        kx = min(h + 1, X.shape[-1])
        out = torch.zeros_like(X)
        out[:, :, :h, :kx] = X[:, :, :h, :kx] * w[:, :h, :kx]         # k_y = 0 .. K/2-1
        out[:, :, H - h:, :kx] = X[:, :, H - h:, :kx] * w[:, h:, :kx]  # k_y = -K/2 .. -1
        return torch.fft.irfft2(out, s=(H, W), norm="ortho")

    def extra_flops(self, h: int, w: int) -> float:
        """FFT pair plus the complex filter product (6 flops per retained mode and channel)."""
        return 2 * _fft_flops(h, w, self.channels) + 6 * self.channels * self.modes * (self.modes // 2 + 1)


class SpatialGate(nn.Module):
    r"""Content gate through a ``d``-channel bottleneck: :math:`\sigma(W_2\,\mathrm{GELU}(W_1 x))`, 1x1 convs."""

    def __init__(self, channels: int, gate_dim: int = 16):
        super().__init__()
        self.down = nn.Conv2d(channels, gate_dim, 1)
        self.up = nn.Conv2d(gate_dim, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.up(F.gelu(self.down(x))))


class SSTMBlock(nn.Module):
    r"""Spectral-spatial token mixer (layout inferred from the abstract):

    .. math:: y = x + \mathrm{DW}_{3\times3}\big(P_{1\times1}(\mathrm{Spec}_K(x) \odot \mathrm{Gate}_d(x))\big)
    """

    def __init__(self, channels: int, modes: int, gate_dim: int = 16):
        super().__init__()
        self.spectral = SpectralMixer(channels, modes)
        self.gate = SpatialGate(channels, gate_dim)
        self.proj = nn.Conv2d(channels, channels, 1)
        self.local = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.local(self.proj(self.spectral(x) * self.gate(x)))


class FNOBlock(nn.Module):
    r"""The ungated ablation: :math:`y = x + \mathrm{DW}_{3\times3}(P_{1\times1}\,\mathrm{Spec}_K(x))`."""

    def __init__(self, channels: int, modes: int):
        super().__init__()
        self.spectral = SpectralMixer(channels, modes)
        self.proj = nn.Conv2d(channels, channels, 1)
        self.local = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.local(self.proj(self.spectral(x)))


class SelfAttention2d(nn.Module):
    r"""Global multi-head self-attention over the ``HW`` tokens, residual: :math:`y = x + W_o\,\mathrm{softmax}(QK^\top/\sqrt{c})V`."""

    def __init__(self, channels: int, heads: int = 1):
        super().__init__()
        if channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        self.channels, self.heads = channels, heads
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        q, k, v = self.qkv(x).reshape(B, 3, self.heads, C // self.heads, H * W).transpose(-1, -2).unbind(1)
        y = F.scaled_dot_product_attention(q, k, v)                  # (B, heads, HW, C/heads)
        return x + self.out(y.transpose(-1, -2).reshape(B, C, H, W))

    def extra_flops(self, h: int, w: int) -> float:
        """QK^T and AV: 2 x 2 (HW)^2 C."""
        return 4.0 * (h * w) ** 2 * self.channels


def make_mixer(kind: str, channels: int, modes: int, gate_dim: int = 16) -> nn.Module:
    """One of :data:`MIXERS` at ``channels`` (``'none'`` is the identity: the plain U-Net)."""
    if kind == "none":
        return nn.Identity()
    if kind == "attention":
        return SelfAttention2d(channels, heads=2 if channels % 2 == 0 else 1)
    if kind == "fno":
        return FNOBlock(channels, modes)
    if kind == "sstm":
        return SSTMBlock(channels, modes, gate_dim)
    raise ValueError(f"mixer must be one of {MIXERS}, got {kind!r}")


class ConvBlock(nn.Sequential):
    """Two 3x3 convolutions, each followed by GroupNorm (one group) and ReLU."""

    def __init__(self, cin: int, cout: int):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(1, cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(1, cout), nn.ReLU())


class TinyUNet(nn.Module):
    """A three-level U-Net (widths w, 2w, 4w; bottleneck 4w at 1/8) with a token mixer after the
    encoder block at 1/4 resolution and after the bottleneck at 1/8: the two lowest resolutions.

    Parameters
    ----------
    width : int
        w, the channels of the first level.
    mixer : {'none', 'attention', 'fno', 'sstm'}
    modes : int
        K of the spectral mixers (at most the side of the 1/8 map).
    gate_dim : int
        d of the SSTM gate.

    Input (B, 1, H, W) with H, W divisible by 8; output logits (B, classes, H, W) (``classes`` = 1:
    one binary logit; 3 for the instrument variant).
    """

    def __init__(self, width: int, mixer: str = "none", modes: int = 8, gate_dim: int = 16, classes: int = 1):
        super().__init__()
        w1, w2, w3 = width, 2 * width, 4 * width
        self.width, self.mixer_kind, self.modes, self.gate_dim = width, mixer, modes, gate_dim
        self.enc1, self.enc2, self.enc3 = ConvBlock(1, w1), ConvBlock(w1, w2), ConvBlock(w2, w3)
        self.mix3 = make_mixer(mixer, w3, modes, gate_dim)
        self.bottleneck = ConvBlock(w3, w3)
        self.mix4 = make_mixer(mixer, w3, modes, gate_dim)
        self.dec3, self.dec2, self.dec1 = ConvBlock(2 * w3, w2), ConvBlock(2 * w2, w1), ConvBlock(2 * w1, w1)
        self.head = nn.Conv2d(w1, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 8 or x.shape[-2] % 8:
            raise ValueError(f"TinyUNet needs H and W divisible by 8, got {tuple(x.shape[-2:])}")
        e1 = self.enc1(x)                                        # (B, w, H, W)
        e2 = self.enc2(F.max_pool2d(e1, 2))                      # (B, 2w, H/2, W/2)
        e3 = self.mix3(self.enc3(F.max_pool2d(e2, 2)))           # (B, 4w, H/4, W/4)
        b = self.mix4(self.bottleneck(F.max_pool2d(e3, 2)))      # (B, 4w, H/8, W/8)
        up = lambda t: F.interpolate(t, scale_factor=2, mode="nearest")  # noqa: E731
        d3 = self.dec3(torch.cat([up(b), e3], 1))
        d2 = self.dec2(torch.cat([up(d3), e2], 1))
        d1 = self.dec1(torch.cat([up(d2), e1], 1))
        return self.head(d1)


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters (a complex spectral weight counts as two reals)."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def count_flops(model: nn.Module, height: int, width: int, in_channels: int = 1) -> float:
    """FLOPs of one forward pass on one ``in_channels x height x width`` image (see module docstring)."""
    total = [0.0]

    def conv_hook(module, inputs, output):
        cin = module.in_channels // module.groups
        k = module.kernel_size[0] * module.kernel_size[1]
        total[0] += 2.0 * cin * k * module.out_channels * output.shape[-1] * output.shape[-2]

    def extra_hook(module, inputs, output):
        total[0] += module.extra_flops(inputs[0].shape[-2], inputs[0].shape[-1])

    handles = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            handles.append(m.register_forward_hook(conv_hook))
        elif hasattr(m, "extra_flops"):
            handles.append(m.register_forward_hook(extra_hook))
    try:
        with torch.no_grad():
            model(torch.zeros(1, in_channels, height, width))
    finally:
        for h in handles:
            h.remove()
    return total[0]


# ------------------------------------------------------------------ analytic single-layer counts
def flops_attention(n, channels):
    """FLOPs of :class:`SelfAttention2d` on ``n = HW`` tokens: 1x1 qkv (6nC^2), scores and AV
    (4n^2C), output 1x1 (2nC^2). Works on numbers and sympy symbols."""
    return 8 * n * channels**2 + 4 * n**2 * channels


def flops_sstm(n, channels, modes, gate_dim=16, log2=None):
    """FLOPs of :class:`SSTMBlock` on ``n = HW`` tokens: FFT pair (5 n log2 n C), complex filter
    (6 C K (K/2+1)), gate (4 n C d), 1x1 projection (2 n C^2), depthwise 3x3 (18 n C)."""
    log2 = log2 or (lambda v: math.log2(v))
    return (5 * n * log2(n) * channels + 6 * channels * modes * (modes // 2 + 1)
            + 4 * n * channels * gate_dim + 2 * n * channels**2 + 18 * n * channels)


def flop_ratio_symbolic(side: int = 352, channels: int = 64, modes: int = 32, gate_dim: int = 16):
    """sympy: ``(ratio at side x side as a float, its limit as HW -> oo)`` of attention over SSTM FLOPs."""
    n = sympy.symbols("n", positive=True)
    log2 = lambda v: sympy.log(v, 2)  # noqa: E731
    ratio = flops_attention(n, channels) / flops_sstm(n, channels, modes, gate_dim, log2=log2)
    return float(ratio.subs(n, side * side).evalf()), sympy.limit(ratio, n, sympy.oo)


def corner_gradient(block: nn.Module, channels: int, size: int = 32, dtype=torch.float64) -> float:
    """:math:`\\max_c |\\partial \\sum_c y_c(0,0) / \\partial x_c(H-1, W-1)|` for one input (autograd).

    Nonzero means the output at one corner sees the input at the opposite corner."""
    block = block.to(dtype)
    x = torch.randn(1, channels, size, size, dtype=dtype, generator=torch.Generator().manual_seed(0), requires_grad=True)
    block(x)[0, :, 0, 0].sum().backward()
    return float(x.grad[0, :, -1, -1].abs().max())
