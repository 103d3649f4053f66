"""Other libraries' RoPE application on queries and keys, to check and time ours against (Su et al. 2021, RoFormer).

:func:`reference_ropes` gives, per installed library, a call that rotates ``q`` and ``k`` the way that library
does: HF transformers (Llama's ``apply_rotary_pos_emb``), rotary-embedding-torch and x-transformers. Each states
its pair layout, as :func:`pe_toolkit.encoders.rotary.apply_rope` names them (``"half-split"``: pairs
``(i, i + d/2)``; ``"interleaved"``: pairs ``(2i, 2i + 1)``), so that its outputs can be compared with ours in the
same layout. None of these libraries is a dependency: one that is not installed is reported, not raised.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from importlib.metadata import version

import torch
from torch import Tensor

__all__ = ["RopeImplementation", "reference_ropes"]


@dataclasses.dataclass(frozen=True)
class RopeImplementation:
    """One library's RoPE application: ``fn()`` returns the rotated ``(q, k)``."""

    fn: Callable[[], tuple[Tensor, Tensor]]
    layout: str
    library: str
    version: str
    what: str


def reference_ropes(q: Tensor, k: Tensor, base: float = 10_000.0) -> tuple[dict[str, RopeImplementation],
                                                                         dict[str, str]]:
    """The installed libraries' RoPE on ``q`` and ``k`` at positions ``0 .. L-1``.

    Args:
        q, k: ``(B, H, L, head_dim)``, the same shape, float, ``head_dim`` even.
        base: the frequency base (``theta``).
    Returns:
        ``({name: implementation}, {library: the import error})``; what each library precomputes (cos / sin,
        frequencies) is built here, once, outside ``fn``.
    """
    if not (isinstance(q, Tensor) and isinstance(k, Tensor)) or q.dim() != 4 or q.shape != k.shape or q.shape[3] % 2:
        raise ValueError("q and k must be tensors of one shape (B, H, L, head_dim) with an even head_dim, got "
                         f"{tuple(getattr(q, 'shape', ()))} and {tuple(getattr(k, 'shape', ()))}")
    batch, heads, length, head_dim = q.shape
    found, missing = {}, {}

    def load(module: str, library: str):
        try:
            found[library] = importlib.import_module(module)
        except ImportError as error:
            missing[library] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        return found.get(library)

    impls = {}
    if llama := load("transformers.models.llama.modeling_llama", "transformers"):
        config = llama.LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=heads,
                                   max_position_embeddings=length, rope_theta=base)
        cos, sin = llama.LlamaRotaryEmbedding(config)(q, torch.arange(length).expand(batch, length))
        impls["transformers"] = ("half-split", lambda: llama.apply_rotary_pos_emb(q, k, cos, sin),
                                 "apply_rotary_pos_emb(q, k, cos, sin); cos/sin (B, L, hd) from LlamaRotaryEmbedding")
    if ret := load("rotary_embedding_torch", "rotary-embedding-torch"):
        rotary = ret.RotaryEmbedding(dim=head_dim, theta=base)
        freqs = rotary(torch.arange(length, dtype=torch.float32), seq_len=length)  # (L, hd)
        impls["rotary-embedding-torch"] = (
            "interleaved", lambda: (rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)),
            "RotaryEmbedding(dim=hd).rotate_queries_or_keys on q and k (frequencies cached by it)")
        impls["rotary-embedding-torch apply"] = (
            "interleaved", lambda: (ret.apply_rotary_emb(freqs, q), ret.apply_rotary_emb(freqs, k)),
            "apply_rotary_emb(freqs, t) on q and k, freqs (L, hd) precomputed")
    if xt := load("x_transformers.x_transformers", "x-transformers"):
        xt_freqs, xt_scale = xt.RotaryEmbedding(head_dim, base=base).forward_from_seq_len(length)  # (1, L, hd), 1.0
        impls["x-transformers"] = (
            "interleaved", lambda: (xt.apply_rotary_pos_emb(q, xt_freqs, xt_scale),
                                    xt.apply_rotary_pos_emb(k, xt_freqs, xt_scale)),
            "apply_rotary_pos_emb(t, freqs) on q and k, freqs (1, L, hd) from RotaryEmbedding")
    return ({name: RopeImplementation(fn, layout, library, version(library), what)
             for name, (layout, fn, what) in impls.items() for library in [name.split(" ")[0]]}, missing)
