"""Helpers of the tests of an encoder's own tile bias (``tile_bias`` hook): gradients of a layer, calls counted."""

from __future__ import annotations

import torch


def outputs_and_gradients_of(layer, x, **kwargs):
    """The output, the input's gradient and every parameter's, of a fixed weighted sum of the output."""
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = layer(x, **kwargs)
    (out * torch.linspace(-1, 1, out.numel(), dtype=x.dtype).view_as(out)).sum().backward()
    found = {"out": out.detach(), "x": x.grad}
    found.update({n: None if p.grad is None else p.grad.clone() for n, p in layer.named_parameters()})
    return found


def count_calls(monkeypatch, cls, methods: tuple[str, ...] = ("bias", "statistics")) -> dict[str, int]:
    """``{method: calls}``, counted from now on for each of ``cls``'s ``methods`` (which still run)."""
    calls = dict.fromkeys(methods, 0)
    for method in methods:
        real = getattr(cls, method)

        def spy(self, *args, _real=real, _method=method):
            calls[_method] += 1
            return _real(self, *args)

        monkeypatch.setattr(cls, method, spy)
    return calls
