"""FIRE's bias on the tiles of the tiled attention, as a piecewise-linear function of its input (a C++ kernel).

FIRE (Li et al. 2023, arXiv:2310.04418) biases a pair by ``f_h(x)``, ``x = psi(i - j) / psi(max(i, |L|))``, ``f`` a
ReLU MLP ``1 -> U -> H``. Evaluated pair by pair, its cost grows with the hidden units whose kink lies inside the
inputs (``FIRE.bias_function``): 1.4x NoPE's SDPA with 4 of them, 2.2x with all 32 (docs/concepts.md). But ``f_h``
is a line ``A[h, s] + B[h, s] x`` between consecutive kinks (segment ``s``), and with contiguous positions ``x``
falls along each row of a tile to the query's own position and rises after it: a row is a few runs of one segment.
``fire_tiles.cpp`` finds the runs by binary search and evaluates one line per run and head (forward), or sums the
score gradient ``dS``, ``dS x`` and ``dS dx/d|c|`` per head and segment (backward, :meth:`FireTileBias.statistics`);
the parameters' gradients then follow from those sums in one small autograd call
(:meth:`FireTileBias.gradients`): ``sum dS f(x)`` is linear in ``A``, ``B`` and, to first order, in ``x``.

The kernel is built with ``torch.utils.cpp_extension`` on first use (the C++ compiler that ``torch.compile`` needs on
the CPU, and ninja); where that fails, a warning says so and FIRE keeps its pair-by-pair bias.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("fire_tiles.cpp")


# vector instructions per CPU capability (the one PyTorch's own kernels use here); the build is cached under a
# name with the capability, so machines sharing a cache folder never load code their CPU lacks
VECTOR_FLAGS = {"AVX2": ["-mavx2", "-mfma"], "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"]}


@functools.cache
def extension():
    """The compiled kernel module, or ``None`` (with a warning) where it cannot be built."""
    from torch.utils import cpp_extension

    capability = torch.backends.cpu.get_cpu_capability()
    # -fopenmp: at::parallel_for is an OpenMP loop in the headers (serial without it); it links the libgomp.so.1
    # that torch has already loaded, as inductor's compiled kernels do
    flags = ["-O3", "-fopenmp", *VECTOR_FLAGS.get(capability, [])]
    try:
        return cpp_extension.load(name=f"pe_toolkit_fire_tiles_{capability.lower().replace(' ', '_')}",
                                  sources=[str(SOURCE)], extra_cflags=flags, extra_ldflags=["-fopenmp"],
                                  verbose=False)
    except Exception as error:  # noqa: BLE001  (no compiler, no ninja: FIRE keeps its pair-by-pair bias)
        warnings.warn(f"FIRE's tiled kernel could not be built ({type(error).__name__}: {error}); the tiled backend "
                      "evaluates FIRE's MLP pair by pair instead (slower)", RuntimeWarning, stacklevel=2)
        return None


def contiguous_start(positions: Tensor) -> int | None:
    """``positions[0]`` when ``positions`` is ``(L,)`` and ``positions[0] + arange(L)``, else ``None``.
    One host read."""
    if positions.dim() != 1 or positions.numel() == 0:
        return None
    start = positions[0]
    expected = start + torch.arange(positions.numel(), device=positions.device, dtype=positions.dtype)
    if not torch.equal(positions, expected) or start != torch.round(start.double()):
        return None
    return int(start)


def segments(w1: Tensor, b1: Tensor) -> tuple[Tensor, Tensor]:
    """The kinks ``(m,)`` (ascending) of hidden units ``relu(w1 x + b1)`` and which units are on in each of the
    ``m + 1`` segments, ``(m + 1, U)`` bool; segment ``s`` holds the ``x`` with ``s`` kinks below them."""
    moving = w1 != 0
    kinks = torch.sort(-b1[moving] / w1[moving]).values
    if kinks.numel() == 0:
        points = kinks.new_zeros(1)
    else:
        points = torch.cat([kinks[:1] - 1, (kinks[1:] + kinks[:-1]) / 2, kinks[-1:] + 1])
    return kinks, (points.unsqueeze(-1) * w1 + b1) > 0


class FireTileBias:
    """FIRE's bias and its gradients on the tiles of one call (``q_size`` x ``k_size`` indices, tile padding
    included), for contiguous positions starting at ``q_start`` / ``k_start``.

    Built by :meth:`~pe_toolkit.encoders.bias.FIRE.bias_function`'s ``tile_bias`` hook; used by the tiled backend
    (:mod:`pe_toolkit.nn.tiled_attention`): :meth:`bias` per tile in the forward and backward pass,
    :meth:`statistics` per tile of the score gradient, :meth:`gradients` once from their sum.
    """

    def __init__(self, fire, q_start: int, k_start: int, q_size: int, k_size: int, dtype: torch.dtype,
                 kernel) -> None:
        self.fire, self.dtype, self.kernel = fire, dtype, kernel  # kernel: the built extension (:func:`extension`)
        self.q_shift = q_start - k_start
        with torch.no_grad():
            c, limit = fire.c.detach().to(dtype).abs(), fire.threshold.detach().to(dtype).abs()
            device = fire.c.device
            q_pos = q_start + torch.arange(q_size, device=device, dtype=dtype)
            normaliser = torch.maximum(q_pos, limit)
            self.inv_d = 1 / (torch.log1p(c * normaliser) + fire.eps)
            # d x / d|c| = u - x row_c, d x / d|L| = -x row_l (torch.maximum's gradient: half to each on a tie)
            self.row_c = normaliser / (1 + c * normaliser) * self.inv_d
            tie = torch.where(limit > q_pos, 1.0, torch.where(limit == q_pos, 0.5, 0.0)).to(dtype)
            self.row_l = tie * c / (1 + c * limit) * self.inv_d
            self.delta_max = self.q_shift + q_size - 1
            distance = (self.delta_max - torch.arange(q_size + k_size - 1, device=device, dtype=dtype)).abs()
            self.nrev = torch.log1p(c * distance)
            self.urev = distance / (1 + c * distance)
            w1, b1 = fire.mlp[0].weight.detach()[:, 0].to(dtype), fire.mlp[0].bias.detach().to(dtype)
            self.kinks, self.active = segments(w1, b1)
            self.a, self.b = (t.contiguous() for t in self.lines())

    def lines(self, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """``A, B`` ``(H, m + 1)``: ``f_h(x) = A[h, s] + B[h, s] x`` on segment ``s`` (differentiable), in ``dtype``
        (default the kernel's)."""
        a, b = self.fire.active_lines(self.active, self.dtype if dtype is None else dtype)  # (m + 1, H)
        return a.T, b.T

    def _geometry(self, i0: int, j0: int) -> tuple[int, int]:
        zero_shift = i0 + self.q_shift - j0  # the column of the query's own position in row 0
        return self.delta_max - zero_shift, zero_shift

    def bias(self, i0: int, j0: int, rows: int, cols: int) -> Tensor:
        """The bias ``(H, rows, cols)`` of the tile of query indices ``i0 + r``, key indices ``j0 + c``."""
        offset, zero_shift = self._geometry(i0, j0)
        return self.kernel.tile_bias(self.nrev, self.inv_d, self.kinks, self.a, self.b, i0, offset, zero_shift,
                                     rows, cols)

    def statistics(self, i0: int, j0: int, ds: Tensor) -> Tensor:
        """``(5, H, m + 1)`` float64 sums of the tile's score gradient ``ds`` ``(H, rows, cols)`` (summed over the
        batch) per head and segment: ``dS``, ``dS x``, ``dS u``, ``dS x row_c``, ``dS x row_l``. Additive over tiles."""
        offset, zero_shift = self._geometry(i0, j0)
        return self.kernel.tile_statistics(ds.to(self.dtype).contiguous(), self.nrev, self.urev, self.inv_d,
                                           self.row_c, self.row_l, self.kinks, i0, offset, zero_shift)

    def gradients(self, statistics: Tensor, leaves: list[Tensor]) -> tuple[Tensor | None, ...]:
        """The gradients of ``leaves`` (FIRE's parameters) from the summed :meth:`statistics`.

        ``sum dS f(x) = sum_{h,s} A M0 + B M1`` with the segments fixed (their kinks move with the weights, but
        ``f`` is continuous there), and ``x`` enters through ``M1``, whose derivatives in ``|c|`` and ``|L|`` are
        ``Mu - Mc`` and ``-Ml``: a surrogate whose gradient is the exact one.
        """
        with torch.enable_grad():
            a, b = self.lines(torch.float64)  # the sums are float64: so is the surrogate (one tiny graph)
            m0, m1, mu, mc, ml = statistics
            c, limit = self.fire.c.to(a.dtype).abs(), self.fire.threshold.to(a.dtype).abs()
            slope = b.detach()
            surrogate = ((a * m0).sum() + (b * m1).sum() + c * (slope * (mu - mc)).sum()
                         - limit * (slope * ml).sum())
            return torch.autograd.grad(surrogate, leaves, allow_unused=True)
