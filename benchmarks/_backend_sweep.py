"""The attention-backend part of ``speed.py``: time and memory per encoder, backend and length.

Every configuration runs in its own forked child (:func:`pe_toolkit.bench.memory.peak_memory_in_subprocess`): one
causal ``MultiHeadAttention(dim, heads, backend=...)`` layer, float32, batch 1.

* **training**: one forward + backward at length ``L`` (after a warm-up step at ``L = 256``); its
  wall time and the child's peak RSS growth. Dense SDPA is skipped where its ``(B, H, L, L)``
  float bias and mask would not fit the memory cap (the row says so).
* **inference**: forward only under ``torch.no_grad`` at one length for ``sdpa``, ``blocked`` and
  ``flex``: the median of three calls after a warm-up call at the same length (where ``flex``
  compiles its kernel), the peak RSS growth of the three calls, and the largest difference of the
  output from ``sdpa``'s.

* **overhead against NoPE**: per length, one child builds NoPE's SDPA layer and every (encoder,
  backend) layer, runs each once (the first call, timed on its own: the tiled backend compiles its
  tile steps there), then times forward + backward in interleaved rounds (rotated order); the ratio
  of each configuration to NoPE's SDPA is taken per round and summarised by its median.

Memory is measured as users get it: the children run with the process defaults a user has, nothing
tuned. Buffers freed by one tile may stay on the heap; a backend whose peak RSS grows with that is
reported as it is. Times are read with :func:`pe_toolkit.bench.timing.clock` (torch.utils.benchmark's timer,
which synchronises CUDA).
"""

from __future__ import annotations

import statistics
from typing import Any

import pe_toolkit as pet
from pe_toolkit.bench.timing import clock, time_interleaved


def dense_bytes(length: int, batch: int, heads: int) -> int:
    """What dense SDPA with a bias holds at least: the float32 bias, the masked copy and the scores."""
    return 3 * 4 * batch * heads * length * length


def _layer(name: str, length: int, backend: str, dim: int, heads: int, device: str):
    import torch

    if name == "nope":
        return pet.MultiHeadAttention(dim, heads, causal=True, backend=backend).to(torch.device(device))
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
    start = clock()
    layer(x).sum().backward()
    return clock() - start


def warm_train(name: str, backend: str, dim: int, heads: int, device: str):
    def warm() -> None:
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
            start = clock()
            out = layer(x)
            times.append(clock() - start)
    # plain floats: a tensor would travel through shared memory that dies with this child
    return {"median_s": sorted(times)[1], "sample": out[0, -8:].double().cpu().flatten().tolist()}


def warm_infer(name: str, length: int, backend: str, dim: int, heads: int, device: str):
    """A forward at the same length: FlexAttention compiles its kernel here, outside the measurement."""

    def warm() -> None:
        import torch

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

    torch.manual_seed(0)
    layer = _layer(name, length, "sdpa", dim, heads, device)
    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(1, length, dim, device=device, requires_grad=True)

    def step(module) -> tuple[float, Any, Any]:
        start = clock()
        out = module(x)
        (grad,) = torch.autograd.grad(out.square().sum(), [x])
        return clock() - start, out.detach(), grad

    start = clock()
    _, out_compiled, grad_compiled = step(compiled)
    compile_s = clock() - start
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


def overhead_vs_nope(configs: list[tuple[str, str]], length: int, dim: int, heads: int, device: str,
                     rounds: int, budget_s: float | None) -> dict[str, Any]:
    """Child: forward + backward of NoPE's SDPA layer and of each ``(encoder, backend)`` at ``length``.

    Each layer runs once first (its first call: the tiled backend compiles its tile steps there; seconds
    reported as ``first_call_s``); then rounds of one step per configuration in rotated order, until
    ``rounds`` rounds or ``budget_s`` seconds (at least 3 rounds). Per configuration: the times and the
    per-round ratios to NoPE's SDPA step of the same round.
    """
    import torch

    torch.manual_seed(0)
    x = torch.randn(1, length, dim, device=device, requires_grad=True)
    steps, first, errors = {}, {}, {}
    for name, backend in [("nope", "sdpa"), *configs]:
        key = f"{name}/{backend}"
        try:
            layer = _layer(name, length, backend, dim, heads, device)

            def step(layer=layer) -> None:
                x.grad = None
                layer.zero_grad(set_to_none=True)
                layer(x).sum().backward()

            start = clock()
            step()
            first[key] = clock() - start
            steps[key] = step
        except Exception as error:  # noqa: BLE001  (record it, keep the others)
            errors[key] = f"{type(error).__name__}: {error}".splitlines()[0][:200]
    if "nope/sdpa" not in steps:
        return {"errors": errors, "first_call_s": first, "times_s": {}, "ratios": {}}
    timed = time_interleaved(steps, warmup=0, repeats=rounds, budget_s=budget_s, min_repeats=min(3, rounds))
    times = {key: t["times_s"] for key, t in timed.items()}
    base = times["nope/sdpa"]
    ratios = {k: statistics.median(a / b for a, b in zip(v, base)) for k, v in times.items()}
    return {"errors": errors, "first_call_s": first, "times_s": times, "ratios": ratios}
