"""Shared by the tiled-backend tests: a layer's output and every gradient, and their equality to a reference."""

from __future__ import annotations

import torch


def outputs_and_gradients(layer, x, rows=slice(None), **kwargs):
    """Output and the gradients of the input and of every parameter, of a weighted sum over ``rows``."""
    layer.zero_grad()
    x = x.clone().requires_grad_(True)
    out = layer(x, **kwargs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out[:, rows] * weight[:, rows]).sum().backward()
    return out.detach()[:, rows], x.grad, {n: p.grad for n, p in layer.named_parameters()}


def assert_same(reference, tiled, x, rows=slice(None), tol=1e-5, **kwargs):
    """Equal outputs, input gradients and parameter gradients (``None`` on both sides or close); the tiled ones."""
    out_a, dx_a, pa = outputs_and_gradients(reference, x, rows, **kwargs)
    out_b, dx_b, pb = outputs_and_gradients(tiled, x, rows, **kwargs)
    torch.testing.assert_close(out_b, out_a, rtol=tol, atol=tol)
    torch.testing.assert_close(dx_b, dx_a, rtol=tol, atol=tol)
    assert pa.keys() == pb.keys()
    for n in pa:
        assert (pa[n] is None) == (pb[n] is None), n
        if pa[n] is not None:
            torch.testing.assert_close(pb[n], pa[n], rtol=tol, atol=tol, msg=n)
    return pb


def compiled_equals_eager(tiled, x, monkeypatch, **kwargs) -> dict:
    """The tiled layer's output and gradients with its tile steps compiled (inductor) equal the eager ones;
    the compiled parameter gradients. ``kwargs`` go to the layer."""
    from pe_toolkit.nn import tiled_attention

    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    eager = outputs_and_gradients(tiled, x, **kwargs)
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", True)
    torch._dynamo.reset()
    compiled = outputs_and_gradients(tiled, x, **kwargs)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-5, atol=1e-5)
    for n in eager[2]:
        torch.testing.assert_close(compiled[2][n], eager[2][n], rtol=1e-5, atol=1e-5, msg=n)
    return compiled[2]
