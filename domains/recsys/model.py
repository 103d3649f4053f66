"""SASRec with a pluggable positional encoding.

Kang & McAuley 2018, "Self-Attentive Sequential Recommendation", ICDM, arXiv:1808.09781: item
embeddings -> causal self-attention blocks -> the hidden state at each position scores every item by a
dot product with the (shared) item embeddings.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import check_int
from pe_toolkit.nn import Transformer, TransformerConfig
from pe_toolkit.registry import encoder_info

__all__ = ["SASRec", "default_encoding_options"]

# encoders with one set of parameters per layer in their papers (CoPE's RAM code, CAPE's per-attention
# module); the others are shared (SASRec's input table, TiSASRec's interval tables)
_PER_LAYER = ("cope", "cape")


def default_encoding_options(encoding: str, max_len: int) -> dict[str, Any]:
    """Options that size an encoder to windows of ``max_len`` items (empty for size-free encoders)."""
    if encoding == "learned":
        return {"max_len": max_len}
    if encoding == "cope":
        return {"npos_max": max_len + 1}
    if encoding == "cape":
        return {"max_len": max_len + 1}
    if encoding == "time_interval":
        return {"max_len": max_len}
    return {}


class SASRec(nn.Module):
    """SASRec: a causal Transformer over left-padded item sequences, PE chosen by registry name.

    Args:
        num_items: items ``1 .. num_items`` (0 is padding).
        max_len: window length ``L`` (50 in SASRec for MovieLens).
        dim, num_heads, num_layers, dropout: trunk size (SASRec: 50 / 1 / 2 / 0.2 on MovieLens-1M). The
            dropout acts once on the input (item embedding plus positional embedding) and inside the blocks.
        encoding: a registered encoder (``"learned"``, ``"nope"``, ``"rope"``, ``"cope"``, ``"cape"``,
            ``"time_interval"``, ...).
        encoding_options: its options; defaults from :func:`default_encoding_options` fill the gaps.
        share_encoding: one encoder for all layers; ``None`` picks per-layer for ``cope`` / ``cape``.
        norm, mlp: block options (SASRec uses layer norm and a two-layer feed-forward net).

    Positions: index ``arange(L)`` of the padded window (SASRec's; the most recent item is always at
    ``L - 1``), or, for an encoder with ``position_vector_dims == 1`` (``time_interval``), the pair
    ``(index, time)`` per slot, which needs ``times``.

    Shapes: ``forward(items (B, L), times (B, L) | None) -> hidden (B, L, dim)``;
    ``scores(hidden (..., dim)) -> (..., num_items + 1)`` with ``-inf`` at the padding index.
    """

    def __init__(
        self,
        num_items: int,
        *,
        max_len: int = 50,
        dim: int = 64,
        num_heads: int = 2,
        num_layers: int = 2,
        dropout: float = 0.2,
        encoding: str = "learned",
        encoding_options: dict[str, Any] | None = None,
        share_encoding: bool | None = None,
        norm: str = "layernorm",
        mlp: str = "gelu",
    ) -> None:
        super().__init__()
        self.num_items = check_int("SASRec: num_items", num_items)
        self.max_len = check_int("SASRec: max_len", max_len)
        info = encoder_info(encoding)
        options = {**default_encoding_options(encoding, max_len), **dict(encoding_options or {})}
        share = encoding not in _PER_LAYER if share_encoding is None else bool(share_encoding)
        self.encoding = info.name
        self.uses_time = getattr(info.cls, "position_vector_dims", 0) == 1
        self.item_embedding = nn.Embedding(num_items + 1, dim, padding_idx=0)
        nn.init.normal_(self.item_embedding.weight, std=dim**-0.5)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
        self.trunk = Transformer(TransformerConfig(
            vocab_size=None, dim=dim, num_heads=num_heads, num_layers=num_layers, causal=True, encoding=encoding,
            encoding_options=options, share_encoding=share, norm=norm, mlp=mlp, dropout=dropout,
        ))

    def positions(self, items: Tensor, times: Tensor | None) -> Tensor:
        """``(L,)`` long indices, or ``(B, L, 2)`` float64 ``(index, time)`` for time-aware encoders."""
        b, length = items.shape
        index = torch.arange(length, device=items.device)
        if not self.uses_time:
            return index
        if times is None:
            raise ValueError(f"SASRec: encoding {self.encoding!r} reads timestamps: pass times= (B, L)")
        if not isinstance(times, Tensor) or times.dtype == torch.bool or times.is_complex():
            raise TypeError(f"SASRec: times must be a real-valued tensor (B, L) of timestamps, got "
                            f"{getattr(times, 'dtype', type(times).__name__)}")
        if tuple(times.shape) != (b, length):
            raise ValueError(f"SASRec: times must have shape ({b}, {length}), got {tuple(times.shape)}")
        if times.is_floating_point() and not bool(torch.isfinite(times).all()):
            bad = (~torch.isfinite(times)).nonzero()[0].tolist()
            raise ValueError(f"SASRec: times holds NaN or inf (first at [{bad[0]}, {bad[1]}]); timestamps must be "
                             f"finite")
        return torch.stack([index.to(torch.float64).expand(b, length), times.to(torch.float64)], dim=-1)

    def forward(self, items: Tensor, times: Tensor | None = None) -> Tensor:
        if not isinstance(items, Tensor) or items.is_floating_point() or items.dtype in (torch.bool, torch.complex64,
                                                                                           torch.complex128):
            raise TypeError(f"SASRec: items must be an integer tensor (B, L) of item ids, got "
                            f"{getattr(items, 'dtype', type(items).__name__)}")
        if items.dim() != 2:
            raise ValueError(f"SASRec: items must be an integer tensor (B, L), got {tuple(items.shape)} {items.dtype}")
        if items.shape[1] > self.max_len:
            raise ValueError(f"SASRec: sequences of {items.shape[1]} items exceed max_len={self.max_len}")
        if items.numel() and (int(items.min()) < 0 or int(items.max()) > self.num_items):
            raise ValueError(
                f"SASRec: item indices must lie in [0, {self.num_items}], got [{int(items.min())}, {int(items.max())}]"
            )
        real = items != 0
        if items.shape[1] and not bool(real.any(-1).all()):
            rows = (~real.any(-1)).nonzero().flatten().tolist()
            raise ValueError(f"SASRec: items rows {rows[:10]} hold only padding (id 0); every sequence needs at "
                             f"least one item")
        # the trunk drops out its input once, after the embed hook (SASRec: dropout of item + position
        # embedding); a second dropout here would zero 1 - (1 - p)^2 of the inputs (36 % at p = 0.2)
        x = self.item_embedding(items)
        hidden = self.trunk.forward_features(x, positions=self.positions(items, times), padding_mask=real)
        return hidden * real.unsqueeze(-1)

    def scores(self, hidden: Tensor) -> Tensor:
        """Dot products with every item embedding; the padding index scores ``-inf``."""
        logits = hidden @ self.item_embedding.weight.transpose(0, 1)
        logits[..., 0] = float("-inf")
        return logits
