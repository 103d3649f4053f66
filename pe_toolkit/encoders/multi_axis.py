"""Multi-axis rotary position embedding: RoPE over positions with 2 or 3 coordinates (image, video, M-RoPE).

Each head's ``head_dim / 2`` rotation pairs turn by an angle that is linear in the position vector
``p = (p_0, ..., p_{A-1})``: pair ``k`` of head ``h`` turns by ``s * (p . F[h, k])`` with a frequency
matrix ``F`` ``(1 or H, head_dim / 2, A)`` and a scale ``s``. Then ``q_i . k_j`` depends only on
``p_j - p_i`` (the rotations of one pair commute), on every axis at once. The variants differ only
in ``F``:

* **axial** (one axis per pair, :func:`axial_frequencies`): ``F[k] = theta_k e_{a(k)}``. Which axis
  a pair serves and at what frequency is a *layout*:

  - ``"per_axis"``: the pairs are cut into consecutive sections, one per axis, and each section has
    its own geometric ladder ``theta_j = base ** (-j / n_a)``, ``j < n_a`` (RoPE-Axial, Heo et al. 2024,
    arXiv:2403.13298; DINOv3, Simeoni et al. 2025, arXiv:2508.10104, which also scales by ``2 pi`` and
    feeds patch centres normalised to ``[-1, 1]``; Qwen2-VL's vision encoder).
  - ``"interleaved"``: one ladder ``theta_k = base ** (-2k / d)`` over all ``d / 2`` pairs, dealt to
    the axes in turn (pair ``k`` to axis ``k mod A``), then grouped by axis (Pixtral, Mistral AI 2024).
  - ``"sections"``: one ladder over all pairs, consecutive sections per axis (Qwen2-VL's M-RoPE, Wang
    et al. 2024, arXiv:2409.12191: ``mrope_section`` = the section sizes).
  - ``"sections_interleaved"``: one ladder; pair ``k`` serves axis ``k mod 3`` while that axis has
    pairs left in its section, axis 0 otherwise (Qwen3-VL's interleaved M-RoPE).

* **mixed** (RoPE-Mixed, Heo et al. 2024): ``F`` is learned per head, so one pair can follow any
  direction of the plane (or space), e.g. diagonals.

Pair layout inside a head, as in :func:`pe_toolkit.encoders.rotary.apply_rope`: half-split
(``interleaved=False``, the HF models above) or interleaved (``True``, the complex pairs of the
official RoPE-ViT code, naver-ai/rope-vit). The frequencies of an axial layout come out grouped by
axis, ``[axis 0 pairs, axis 1 pairs, ...]``, which is how all of those implementations concatenate
them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pe_toolkit.encoders.base import PositionalEncoding, check_choice, check_float, check_int
from pe_toolkit.encoders.rotary import apply_rope

AXIAL_LAYOUTS = ("per_axis", "interleaved", "sections", "sections_interleaved")

__all__ = ["AXIAL_LAYOUTS", "MultiAxisRotary", "axial_frequencies", "check_base", "check_sections", "default_sections",
           "multi_axis_angles"]


def default_sections(num_pairs: int, axes: int) -> tuple[int, ...]:
    """An even split of ``num_pairs`` rotation pairs over ``axes`` axes (the first axes get the remainder).

    Example:
        >>> default_sections(16, 2), default_sections(16, 3)
        ((8, 8), (6, 5, 5))
    """
    check_int("num_pairs", num_pairs)
    check_int("axes", axes)
    base, extra = divmod(num_pairs, axes)
    return tuple(base + (1 if a < extra else 0) for a in range(axes))


def check_sections(owner: str, sections: Sequence[int], num_pairs: int, axes: int | None = None) -> tuple[int, ...]:
    """``sections`` as a tuple of ints >= 0 that add up to ``num_pairs``; ``ValueError`` / ``TypeError`` naming it."""
    if isinstance(sections, (str, bytes)) or not isinstance(sections, Sequence):
        raise TypeError(f"{owner}: sections must be a sequence of ints (pairs per axis), got {sections!r}")
    values = tuple(sections)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in values):
        raise TypeError(f"{owner}: sections must hold ints (pairs per axis), got {values!r}")
    if axes is not None and len(values) != axes:
        raise ValueError(f"{owner}: sections must have one entry per axis ({axes}), got {values!r}")
    if not 2 <= len(values) <= 3:
        raise ValueError(f"{owner}: sections must cover 2 or 3 axes, got {len(values)} ({values!r})")
    if any(s < 0 for s in values) or sum(values) != num_pairs:
        raise ValueError(f"{owner}: sections must be >= 0 and add up to the rotary pairs head_dim / 2 = {num_pairs}, "
                         f"got {values!r} (sum {sum(values)})")
    return values


def axial_frequencies(sections: Sequence[int], base: float, layout: str = "per_axis") -> tuple[Tensor, Tensor]:
    """Per-pair inverse frequencies and axes of an axial multi-axis RoPE (see the module docstring).

    Args:
        sections: rotation pairs per axis (``sum = head_dim / 2``).
        base: the ladder's base (``theta`` / ``rope_theta``).
        layout: one of :data:`AXIAL_LAYOUTS`.

    Returns:
        ``(theta, axis)``: float64 ``(P,)`` and long ``(P,)``, ``P = sum(sections)``, in the order the pairs
        sit in a head.

    Example:
        >>> theta, axis = axial_frequencies((2, 2), 100.0)
        >>> theta.tolist(), axis.tolist()
        ([1.0, 0.1, 1.0, 0.1], [0, 0, 1, 1])
    """
    sections = tuple(sections)
    check_choice("layout", layout, AXIAL_LAYOUTS)
    num_pairs, axes = sum(sections), len(sections)
    ladder = base ** (-torch.arange(num_pairs, dtype=torch.float64) / num_pairs)  # base ** (-2k / d)
    if layout == "per_axis":
        theta = torch.cat([base ** (-torch.arange(n, dtype=torch.float64) / n) for n in sections])
        axis = torch.cat([torch.full((n,), a, dtype=torch.long) for a, n in enumerate(sections)])
    elif layout == "sections":
        theta = ladder
        axis = torch.cat([torch.full((n,), a, dtype=torch.long) for a, n in enumerate(sections)])
    elif layout == "sections_interleaved":
        theta = ladder
        axis = torch.zeros(num_pairs, dtype=torch.long)
        for a in range(1, axes):  # Qwen3-VL: pair k serves axis k % 3 within that axis' share
            k = torch.arange(a, min(num_pairs, sections[a] * axes), axes)
            axis[k] = a
        counts = torch.bincount(axis, minlength=axes).tolist()
        if tuple(counts) != sections:
            raise ValueError(f"layout 'sections_interleaved': sections {sections} do not interleave over "
                             f"{num_pairs} pairs (they give {tuple(counts)}); each later section may hold at "
                             f"most every {axes}-th pair")
    else:  # "interleaved": one ladder dealt round-robin, then grouped by axis (Pixtral)
        if len(set(sections)) != 1:
            raise ValueError(f"layout 'interleaved' deals the pairs to the axes in turn, so sections must be equal, "
                             f"got {sections}")
        theta = torch.cat([ladder[a::axes] for a in range(axes)])
        axis = torch.cat([torch.full((n,), a, dtype=torch.long) for a, n in enumerate(sections)])
    return theta, axis


def multi_axis_angles(positions: Tensor, frequencies: Tensor, scale: float = 1.0) -> Tensor:
    """Rotation angles ``scale * p . F[h, k]`` of vector positions.

    Args:
        positions: ``(L, A)`` or ``(B, L, A)``.
        frequencies: ``(P, A)`` (every head alike) or ``(H, P, A)`` (one matrix per head).
        scale: multiplies every angle (``2 pi`` in DINOv3).

    Returns:
        ``(1 or B, 1 or H, L, P)`` in the dtype of ``frequencies``.
    """
    p = positions.to(frequencies.dtype)
    if p.dim() == 2:
        p = p.unsqueeze(0)
    if frequencies.dim() == 2:
        angles = (p @ frequencies.transpose(0, 1)).unsqueeze(1)  # (B, 1, L, P)
    else:
        angles = torch.einsum("bla,hpa->bhlp", p, frequencies)  # (B, H, L, P)
    return angles * scale if scale != 1.0 else angles


class MultiAxisRotary(PositionalEncoding):
    """Base of the multi-axis rotary encoders: ``rotate`` by :func:`multi_axis_angles` of a frequency matrix.

    Subclasses set ``self.axes`` (2 or 3), ``self.scale``, ``self.interleaved`` and provide
    :meth:`frequency_matrix` ``(P, A)`` or ``(H, P, A)`` (``P = head_dim / 2``, ``H`` heads, ``A`` axes).
    Positions are ``(L, A)`` or ``(B, L, A)``
    (``position_vector_dims = 1``); the wrong number of coordinates is a ``ValueError`` naming it.
    Angles, cos and sin are computed in float64 for float64 inputs and float32 otherwise.
    """

    position_vector_dims = 1
    axes: int = 2
    scale: float = 1.0
    interleaved: bool = False

    def __init__(self, dim: int, num_heads: int, *, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        if self.head_dim % 2:
            raise ValueError(f"{self.registry_name}: head_dim = dim / num_heads = {self.head_dim} must be even "
                             "(rotation pairs)")

    def frequency_matrix(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The frequencies ``(P, A)`` or ``(H, P, A)`` in ``dtype``."""
        raise NotImplementedError

    def check_positions_arity(self, positions: Tensor, name: str = "positions") -> None:
        """``TypeError`` for a non-tensor or a boolean tensor, ``ValueError`` unless the shape is ``(L, A)`` or
        ``(B, L, A)``."""
        if not isinstance(positions, Tensor):
            raise TypeError(f"{self.registry_name}: {name} must be a torch.Tensor, got {type(positions).__name__}")
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"{self.registry_name}: {name} must hold integer or float coordinates, "
                            f"got {positions.dtype}")
        if positions.dim() not in (2, 3) or positions.shape[-1] != self.axes:
            raise ValueError(f"{self.registry_name}: {name} must have shape (L, {self.axes}) or (B, L, {self.axes}) "
                             f"({self.axes} coordinates per token), got {tuple(positions.shape)}")

    def angles(self, positions: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Angles ``(1 or B, 1 or H, L, head_dim / 2)`` of positions ``(L, A)`` / ``(B, L, A)``."""
        self.check_positions_arity(positions)
        return multi_axis_angles(positions, self.frequency_matrix(dtype), self.scale)

    def rotate_one(self, x: Tensor, positions: Tensor, name: str = "positions") -> Tensor:
        """``x`` ``(B, H or 1, L, head_dim)`` rotated by the angles of ``positions``."""
        self.check_positions_arity(positions, name)
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        theta = multi_axis_angles(positions, self.frequency_matrix(dtype), self.scale)
        if theta.shape[1] > 1 and x.shape[1] != theta.shape[1]:
            raise ValueError(f"{self.registry_name}: per-head frequencies need one rotation per head, got a tensor "
                             f"with {x.shape[1]} heads for {theta.shape[1]} (grouped-query keys are not supported)")
        return apply_rope(x.to(dtype), theta.cos(), theta.sin(), interleaved=self.interleaved).to(x.dtype)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate_one(q, q_pos, "q_pos"), self.rotate_one(k, k_pos, "k_pos")


def check_base(owner: str, base: float) -> float:
    """``base`` as a float > 1 (a geometric ladder of decreasing frequencies)."""
    value = check_float(f"{owner}: base", base)
    if value <= 1.0:
        raise ValueError(f"{owner}: base must be > 1, got {value}")
    return value

