"""The attention-backend part of ``speed.py``: time and memory per encoder, backend and length.

Every configuration runs in its own forked child (see ``common.peak_memory_in_subprocess``): one
causal ``MultiHeadAttention(dim, heads, backend=...)`` layer, float32, batch 1.

* **training**: one forward + backward at length ``L`` (after a warm-up step at ``L = 256``); its
  wall time and the child's peak RSS growth. Dense SDPA is skipped where its ``(B, H, L, L)``
  float bias and mask would not fit the memory cap (the row says so).
* **inference**: forward only under ``torch.no_grad`` at one length for ``sdpa``, ``blocked`` and
  ``flex``: the median of three calls after a warm-up call at the same length (where ``flex``
  compiles its kernel), the peak RSS growth of the three calls, and the largest difference of the
  output from ``sdpa``'s.

The children fix glibc's mmap threshold at 1 MiB (``mallopt(M_MMAP_THRESHOLD)``, as the environment
variable ``MALLOC_MMAP_THRESHOLD_=1048576`` would): with glibc's default dynamic threshold, the
freed buffers of one query tile stay on the heap and the RSS of a blocked training step grows by
about one tile per tile (measured: 4.2 GiB instead of 0.3 GiB for ALiBi at L = 16,384), which
measures the allocator, not the tensors alive.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pe_toolkit as pet

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 1 << 20


def fix_mmap_threshold() -> bool:
    """``mallopt(M_MMAP_THRESHOLD, 1 MiB)`` in this process; False where glibc is not there."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except OSError:
        return False


def dense_bytes(length: int, batch: int, heads: int) -> int:
    """What dense SDPA with a bias holds at least: the float32 bias, the masked copy and the scores."""
    return 3 * 4 * batch * heads * length * length


def _layer(name: str, length: int, backend: str, dim: int, heads: int, device: str):
    import torch

    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:
        options["max_len"] = max(int(options["max_len"]), length)
    encoding = pet.get_encoder(name, dim, heads, **options)
    return pet.MultiHeadAttention(dim, heads, causal=True, encoding=encoding, backend=backend).to(torch.device(device))


def train_step(name: str, length: int, backend: str, dim: int, heads: int, device: str) -> float:
    """Child: one forward + backward at ``length``; its seconds."""
    import torch

    torch.manual_seed(0)
    layer = _layer(name, length, backend, dim, heads, device)
    x = torch.randn(1, length, dim, device=device, requires_grad=True)
    start = time.perf_counter()
    layer(x).sum().backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def warm_train(name: str, backend: str, dim: int, heads: int, device: str):
    def warm() -> None:
        fix_mmap_threshold()
        train_step(name, 256, backend, dim, heads, device)

    return warm


def infer(name: str, length: int, backend: str, dim: int, heads: int, device: str) -> dict[str, Any]:
    """Child: forward at ``length``, median of 3 calls (after the warm-up call at the same length), and
    the last 8 output rows (the layers of every backend share the seed, so outputs are comparable)."""
    import torch

    torch.manual_seed(0)
    layer = _layer(name, length, backend, dim, heads, device)
    x = torch.randn(1, length, dim, device=device)
    times = []
    with torch.no_grad():
        for _ in range(3):
            start = time.perf_counter()
            out = layer(x)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    # plain floats: a tensor would travel through shared memory that dies with this child
    return {"median_s": sorted(times)[1], "sample": out[0, -8:].double().cpu().flatten().tolist()}


def warm_infer(name: str, length: int, backend: str, dim: int, heads: int, device: str):
    """A forward at the same length: FlexAttention compiles its kernel here, outside the measurement."""

    def warm() -> None:
        import torch

        fix_mmap_threshold()
        torch.manual_seed(0)
        layer = _layer(name, length, backend, dim, heads, device)
        with torch.no_grad():
            layer(torch.randn(1, length, dim, device=device))

    return warm


def compiled_vs_eager(name: str, length: int, dim: int, heads: int, device: str, rounds: int) -> dict[str, Any]:
    """Child: forward + backward of one layer, eager and ``torch.compile(fullgraph=True)`` (inductor).

    The first compiled call (which compiles) is timed on its own; then ``rounds`` rounds alternate one
    eager and one compiled step, and each side's median is reported, with the largest difference of the
    outputs and of the input gradients between the two.
    """
    import torch

    fix_mmap_threshold()
    torch.manual_seed(0)
    layer = _layer(name, length, "sdpa", dim, heads, device)
    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(1, length, dim, device=device, requires_grad=True)

    def step(module) -> tuple[float, Any, Any]:
        start = time.perf_counter()
        out = module(x)
        (grad,) = torch.autograd.grad(out.square().sum(), [x])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start, out.detach(), grad

    start = time.perf_counter()
    _, out_compiled, grad_compiled = step(compiled)
    compile_s = time.perf_counter() - start
    _, out_eager, grad_eager = step(layer)  # eager warm-up
    eager_times, compiled_times = [], []
    for _ in range(rounds):
        eager_times.append(step(layer)[0])
        compiled_times.append(step(compiled)[0])
    eager_times.sort()
    compiled_times.sort()
    return {
        "eager_s": eager_times[len(eager_times) // 2],
        "compiled_s": compiled_times[len(compiled_times) // 2],
        "first_call_s": compile_s,
        "max_abs_diff_out": float((out_compiled - out_eager).abs().max()),
        "max_abs_diff_grad": float((grad_compiled - grad_eager).abs().max()),
    }
