"""A decoder-only language model or bidirectional encoder whose positional encoding is chosen by name."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.checkpoint import (
    CONFIG_FILE,
    LEGACY_WEIGHTS_FILE,
    WEIGHTS_ENTRY,
    read_checkpoint,
    read_manifest,
    save_checkpoint,
)
from pe_toolkit.encoders.base import (
    PositionalEncoding,
    check_float,
    check_int,
    check_positions,
    default_positions,
    hook_takes_bounds,
    hook_takes_checked,
    raise_failed,
    require,
    require_all,
    tracing,
)
from pe_toolkit.nn.attention import check_document_ids, check_facts
from pe_toolkit.nn.block import TransformerBlock, make_norm
from pe_toolkit.nn.kv_cache import KVCache
from pe_toolkit.nn.masks import document_positions
from pe_toolkit.nn.position_state import PositionState, read_facts
from pe_toolkit.registry import get_encoder


@dataclass
class TransformerConfig:
    """Configuration of :class:`Transformer`.

    Attributes:
        vocab_size: token vocabulary; ``None`` builds a feature-in / feature-out trunk (no token
            embedding, no output head), for domains that embed their own inputs.
        dim, num_heads, num_layers, num_kv_heads: sizes (``num_kv_heads`` < ``num_heads`` = GQA).
        causal: decoder-only LM (True) or bidirectional encoder (False).
        encoding: registry name of the positional encoding (``"nope"``, ``"rope"``, ``"alibi"``, ...).
        encoding_options: keyword options of that encoding; ``causal`` is filled in from ``causal``.
        share_encoding: one encoding shared by all layers (True) or one per layer. The ``embed`` hook
            runs once on the input, with the first layer's encoding.
        norm, mlp, mlp_hidden, dropout: block options (see :class:`TransformerBlock`).
        norm_eps: epsilon of every norm (``None``: PyTorch's default; Llama checkpoints set
            ``rms_norm_eps``).
        qkv_bias: biases in the query, key and value projections of self-attention (Qwen2).
        tie_embeddings: the output head reuses the token embedding matrix.
        cross_attention: every block also attends to a ``context`` (the decoder of an
            encoder-decoder model); the context keys carry no positional encoding.
        attention_backend: how self-attention is evaluated: ``"auto"`` (default), ``"sdpa"``,
            ``"blocked"`` or ``"flex"`` (see :class:`~pe_toolkit.nn.attention.MultiHeadAttention` and
            :mod:`pe_toolkit.nn.backends`).
        attention_window: sliding-window self-attention: each token sees its last ``attention_window``
            tokens (causal models); :meth:`new_cache` then keeps only those keys.
        attention_block_size: the tile size (queries per tile) of the ``"blocked"`` backend, which it
            selects under ``"auto"`` (memory linear in the length, for training too); ``None``: chosen
            from the length when ``"blocked"`` runs.
        scale_embeddings: Vaswani et al. 2017 (section 3.4): token embeddings initialised
            N(0, dim^-1) and multiplied by ``sqrt(dim)`` at the input, so each coordinate has unit
            scale like an additive sinusoidal PE. ``False`` (default): GPT-2 style N(0, 0.02) and no
            multiplier, under which a sinusoidal PE (unit-scale coordinates) drowns the tokens.
        embedding_std: the token embeddings' initial standard deviation, no multiplier (e.g. 1.0: T5's
            N(0, 1), Raffel et al. 2020, unit-scale tokens whose Adam updates are small relative to their
            scale; untie the head or its logits start large). ``None`` (default): 0.02, or ``dim^-0.5``
            with ``scale_embeddings``, which it excludes.
        qk_norm: RMSNorm on every query and key head, with ``norm_eps`` (QK-norm, see
            :class:`MultiHeadAttention`; Qwen3's ``q_norm`` / ``k_norm``).
        attention: ``"mha"`` (default) or ``"mla"`` (multi-head latent attention, DeepSeek-V2,
            :class:`~pe_toolkit.nn.latent_attention.MultiHeadLatentAttention`); MLA applies its own
            decoupled RoPE and takes ``encoding`` ``"rope"``, ``"nope"`` or a position-only bias.
        latent_options: options of the MLA layers (``latent_dim`` required; ``rope_head_dim``, ...).
    """

    vocab_size: int | None
    dim: int = 256
    num_heads: int = 4
    num_layers: int = 4
    num_kv_heads: int | None = None
    causal: bool = True
    encoding: str = "rope"
    encoding_options: dict[str, Any] = field(default_factory=dict)
    share_encoding: bool = True
    norm: str = "rmsnorm"
    norm_eps: float | None = None
    qkv_bias: bool = False
    mlp: str = "swiglu"
    mlp_hidden: int | None = None
    dropout: float = 0.0
    tie_embeddings: bool = True
    cross_attention: bool = False
    attention_block_size: int | None = None
    attention_backend: str = "auto"
    attention_window: int | None = None
    scale_embeddings: bool = False
    embedding_std: float | None = None
    qk_norm: bool = False
    attention: str = "mha"
    latent_options: dict[str, Any] = field(default_factory=dict)


class Transformer(nn.Module):
    """Token embedding -> ``embed`` hook -> blocks (``rotate`` / ``bias`` hooks) -> norm -> logits.

    Shapes: ``forward(tokens (B, L)) -> logits (B, L, vocab)``; ``forward_features(x (B, L, dim))
    -> hidden (B, L, dim)``. Positions default to ``arange(L)``, offset by the KV-cache length.

    Example:
        >>> model = Transformer(TransformerConfig(vocab_size=100, dim=64, num_heads=4, num_layers=2,
        ...                                       encoding="alibi"))
        >>> model(torch.randint(0, 100, (2, 16))).shape
        torch.Size([2, 16, 100])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        if config.vocab_size is not None:
            check_int("vocab_size", config.vocab_size)
        check_int("num_layers", config.num_layers)
        if config.embedding_std is not None:
            if isinstance(config.embedding_std, bool) or not isinstance(config.embedding_std, (int, float)):
                raise TypeError(f"embedding_std must be a number or None, got {config.embedding_std!r}")
            if not (math.isfinite(config.embedding_std) and config.embedding_std > 0):
                raise ValueError(f"embedding_std must be positive and finite, got {config.embedding_std!r}")
            if config.scale_embeddings:
                raise ValueError("embedding_std and scale_embeddings=True both set the token embeddings' init; "
                                 "give one")
        options = {"causal": config.causal, **config.encoding_options}
        count = 1 if config.share_encoding else config.num_layers
        self.encodings = nn.ModuleList(
            [get_encoder(config.encoding, config.dim, config.num_heads, **options) for _ in range(count)]
        )
        self.token_embedding = (
            nn.Embedding(config.vocab_size, config.dim) if config.vocab_size is not None else None
        )
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                config.dim, config.num_heads, num_kv_heads=config.num_kv_heads, causal=config.causal,
                norm=config.norm, mlp=config.mlp, mlp_hidden=config.mlp_hidden, dropout=config.dropout,
                cross_attention=config.cross_attention, query_block_size=config.attention_block_size,
                qk_norm=config.qk_norm, attention=config.attention, latent_options=config.latent_options,
                backend=config.attention_backend, window=config.attention_window, norm_eps=config.norm_eps,
                qkv_bias=config.qkv_bias,
            )
            for _ in range(config.num_layers)
        )
        self.final_norm = make_norm(config.norm, config.dim, config.norm_eps)
        self.lm_head = None
        if config.vocab_size is not None:
            self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
            if config.tie_embeddings:
                self.lm_head.weight = self.token_embedding.weight
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style N(0, 0.02) for linear and embedding weights; encodings keep their own init."""
        for name, module in self.named_modules():
            if name.startswith("encodings") or not isinstance(module, (nn.Linear, nn.Embedding)):
                continue
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        if self.token_embedding is not None and self.config.scale_embeddings:
            nn.init.normal_(self.token_embedding.weight, std=self.config.dim**-0.5)
        elif self.token_embedding is not None and self.config.embedding_std is not None:
            nn.init.normal_(self.token_embedding.weight, std=self.config.embedding_std)

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """Token embeddings ``(B, L, dim)``, times ``sqrt(dim)`` when ``scale_embeddings``."""
        vocab = self.token_embedding.num_embeddings
        if tokens.numel():
            require(((tokens >= 0) & (tokens < vocab)).all(), f"tokens must be ids in [0, vocab_size={vocab})",
                    lambda: f", got values from {int(tokens.min())} to {int(tokens.max())}")
        embedded = self.token_embedding(tokens)
        return embedded * self.config.dim**0.5 if self.config.scale_embeddings else embedded

    def encoding_for_layer(self, index: int) -> PositionalEncoding:
        return self.encodings[0 if len(self.encodings) == 1 else index]

    def new_cache(self, max_length: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per layer, for :meth:`forward` / :meth:`generate`; with
        ``attention_window`` each keeps only the keys in the window (memory bounded while decoding).
        ``max_length`` (ignored with a window): preallocate exactly that many keys instead of growing
        by doubling (:meth:`generate` knows its final length)."""
        window = self.config.attention_window
        return [KVCache(window=window, max_length=None if window is not None else max_length) for _ in self.blocks]

    def num_parameters(self, exclude_positional: bool = False) -> int:
        """Number of parameters (shared ones once); optionally without the encodings' parameters."""
        excluded = {id(p) for p in self.encodings.parameters()} if exclude_positional else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in excluded)

    def train_positional_only(self) -> None:
        """Freeze every parameter except the positional encodings' (e.g. HeadScale fine-tuning)."""
        self.requires_grad_(False)
        self.encodings.requires_grad_(True)

    def replace_encoding(self, name: str, options: dict[str, Any] | None = None, *,
                         per_layer: bool = False) -> Transformer:
        """Put ``get_encoder(name, dim, num_heads, causal=..., **options)`` in place of the positional encoding.

        Every other weight is left as it is: a trained model evaluated with another encoding (a RoPE
        scaling at inference, a temperature on NoPE) or fine-tuned from it. ``per_layer`` builds one
        encoding per layer (each with its own parameters), otherwise one shared by all layers; the new
        encodings go to the model's device and ``config`` is updated to match (``save_pretrained`` keeps them).

        Returns:
            ``self``.
        """
        options = dict(options or {})
        config = self.config
        count = config.num_layers if per_layer else 1
        built = [get_encoder(name, config.dim, config.num_heads, causal=config.causal, **options) for _ in range(count)]
        self.encodings = nn.ModuleList(built).to(next(self.parameters()).device)
        self.config = dataclasses.replace(config, encoding=name, encoding_options=options, share_encoding=not per_layer)
        return self

    def forward_features(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
        context: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Run the trunk on features ``x (B, L, dim)``; returns normalised hidden states ``(B, L, dim)``.

        ``document_ids (B, L)`` packs several documents per row (a document is a run of equal ids):
        no attention crosses a document boundary and default positions restart at 0 in each
        document, for the ``embed`` hook as for attention.
        """
        return self._trunk(x, {}, positions=positions, padding_mask=padding_mask, cache=cache, context=context,
                           context_padding_mask=context_padding_mask, document_ids=document_ids)

    def _trunk(self, x: Tensor, facts: dict[str, Tensor], *, positions: Tensor | None, padding_mask: Tensor | None,
               cache: list[KVCache] | None, context: Tensor | None, context_padding_mask: Tensor | None,
               document_ids: Tensor | None) -> Tensor:
        """The forward: every check first (value checks read in one host synchronisation together with
        the caller's ``facts``), then the layers with one :class:`PositionState`; a layer that raises
        leaves every cache as it was before the call."""
        if x.dim() != 3 or x.shape[-1] != self.config.dim:
            raise ValueError(f"x must have shape (B, L, {self.config.dim}), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
        batch, length = x.shape[0], x.shape[1]
        if (context is not None) != self.config.cross_attention:
            raise ValueError(
                "context= is required exactly when the model has cross_attention=True "
                f"(cross_attention={self.config.cross_attention}, context given: {context is not None})"
            )
        if context is not None:
            self.blocks[0].cross_attn.check_context(context, batch)
        self._check_cache(cache)
        if document_ids is not None:
            if self.config.attention != "mha":
                raise ValueError("document_ids needs attention='mha' (MLA has no packed-sequence masks)")
            check_document_ids(document_ids, batch, length, is_self=True, cached=cache is not None)
        past = cache[0].length if cache is not None else 0
        held = cache[0].held if cache is not None else 0
        facts = dict(facts)
        if not tracing():
            facts["x.finite"] = torch.isfinite(x).all()
        q_bounds = None
        vector_dims = getattr(self.encodings[0], "position_vector_dims", 0)
        if positions is None:
            if document_ids is None:
                positions = default_positions(length, past, x.device)
                q_bounds = (past, past + length - 1) if length else None
            else:
                positions = document_positions(document_ids)
        else:  # the embed hook reads them first: check them here, not in each layer
            check_positions("positions", positions, length, batch, vector_dims=vector_dims, values=False)
            if positions.numel() and positions.is_floating_point():
                facts["positions.finite"] = torch.isfinite(positions).all()
            elif positions.numel() and vector_dims == 0 and not tracing():
                facts["positions.lo"], facts["positions.hi"] = positions.min(), positions.max()
        if padding_mask is not None:
            if not isinstance(padding_mask, Tensor) or padding_mask.dtype != torch.bool:
                got = padding_mask.dtype if isinstance(padding_mask, Tensor) else type(padding_mask).__name__
                raise TypeError(f"padding_mask must be bool (True = real token), got {got}")
            if tuple(padding_mask.shape) != (batch, held + length):
                raise ValueError(f"padding_mask has shape {tuple(padding_mask.shape)}, expected ({batch}, "
                                 f"{held + length}) ({held} cached + {length} new keys)")
            facts["padding_mask"] = padding_mask.any(-1).all()
        # the encoders' own value checks of the positions (a table's range, a graph's self loops), in the same read
        checks = [check for enc in self.encodings for check in enc.position_checks(positions, "positions")]
        if tracing():  # compiled: the value checks become assertions in the graph
            if "positions.finite" in facts:
                require(facts["positions.finite"], "positions contains NaN or inf")
            if "padding_mask" in facts:
                require(facts["padding_mask"], "padding_mask: every row needs at least one real key (True)")
            require_all(checks)
        else:
            facts.update({f"check.{i}": condition for i, (condition, _, _) in enumerate(checks)})
            values = read_facts(facts)
            if values.get("x.finite", 1.0) == 0.0:
                raise ValueError(f"x holds NaN or inf values ({int((~torch.isfinite(x)).sum())} of {x.numel()} "
                                 "entries)")
            self._raise_failed(values)
            check_facts(values, {"padding_mask": padding_mask})
            raise_failed(checks, [values[f"check.{i}"] for i in range(len(checks))])
            if "positions.lo" in values:
                q_bounds = int(values["positions.lo"]), int(values["positions.hi"])
        k_bounds = q_bounds
        if cache is not None and held:
            k_bounds = None if q_bounds is None or cache[0].bounds is None else (
                min(q_bounds[0], cache[0].bounds[0]), max(q_bounds[1], cache[0].bounds[1]))
        state = PositionState(positions, q_bounds, k_bounds, validated=True)
        snapshots = [c.snapshot() for c in cache] if cache is not None else []
        try:
            if cache is not None:
                for block, c in zip(self.blocks, cache, strict=True):
                    c.claim(block.attn)
            first = self.encodings[0]
            told = {"checked": True} if hook_takes_checked(first, "embed") else {}
            if q_bounds is not None and hook_takes_bounds(first, "embed"):
                told["bounds"] = q_bounds
            x = first.embed(x, positions, **told)
            x = self.dropout(x)
            for i, block in enumerate(self.blocks):
                x = block(
                    x, positions=positions, padding_mask=padding_mask,
                    cache=cache[i] if cache is not None else None, encoding=self.encoding_for_layer(i),
                    context=context, context_padding_mask=context_padding_mask, document_ids=document_ids,
                    state=state,
                )
        except BaseException:
            for c, snap in zip(cache or [], snapshots, strict=True):
                c.restore(snap)
            raise
        return self.final_norm(x)

    def _check_cache(self, cache: list[KVCache] | None) -> None:
        """One KVCache per layer, distinct, owned by this model's layers (or new), all holding as many keys."""
        if cache is None:
            return
        if not isinstance(cache, (list, tuple)):
            raise TypeError(f"cache must be a list of KVCache (Transformer.new_cache()), got {type(cache).__name__}")
        if len(cache) != len(self.blocks):
            raise ValueError(f"cache must hold one KVCache per layer ({len(self.blocks)}), got {len(cache)}")
        seen: dict[int, int] = {}
        for i, c in enumerate(cache):
            if not isinstance(c, KVCache):
                raise TypeError(f"cache[{i}] must be a KVCache, got {type(c).__name__}")
            if id(c) in seen:
                raise ValueError(f"cache[{i}] is the same KVCache object as cache[{seen[id(c)]}]: every layer needs "
                                 "its own (Transformer.new_cache() makes one per layer)")
            seen[id(c)] = i
            c.check_owner(self.blocks[i].attn, f"cache[{i}]")
        lengths = [c.length for c in cache]
        if len(set(lengths)) > 1:
            raise ValueError(f"the layers' caches are out of step (lengths {lengths}): they were not all updated by "
                             "one forward of this model; start from Transformer.new_cache()")

    @staticmethod
    def _raise_failed(values: dict[str, float]) -> None:
        if values.get("positions.finite", 1.0) == 0.0:
            raise ValueError("positions contains NaN or inf")
        if "tokens.lo" in values:
            lo, hi, vocab = int(values["tokens.lo"]), int(values["tokens.hi"]), int(values["tokens.vocab"])
            if lo < 0 or hi >= vocab:
                raise ValueError(f"tokens must be ids in [0, vocab_size={vocab}), got values from {lo} to {hi}")

    def forward(
        self,
        tokens: Tensor,
        *,
        positions: Tensor | None = None,
        padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
        context: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(B, L, vocab)`` for integer tokens ``(B, L)``.

        ``context (B, Lc, dim)`` and its ``context_padding_mask (B, Lc)`` feed the cross-attention
        of a model built with ``cross_attention=True``.
        """
        if self.token_embedding is None:
            raise ValueError("this Transformer has vocab_size=None: call forward_features(x) instead")
        if tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(
                f"tokens must be an integer tensor of shape (B, L), got {tuple(tokens.shape)} {tokens.dtype}"
            )
        facts = {}
        if tokens.numel() and not tracing():  # checked with the trunk's other values, in one host read
            facts = {"tokens.lo": tokens.min(), "tokens.hi": tokens.max(),
                     "tokens.vocab": torch.tensor(self.token_embedding.num_embeddings, device=tokens.device)}
            embedded = self.token_embedding(tokens.clamp(0, self.token_embedding.num_embeddings - 1))
            if self.config.scale_embeddings:
                embedded = embedded * self.config.dim**0.5
        else:
            embedded = self.embed_tokens(tokens)
        hidden = self._trunk(
            embedded, facts, positions=positions, padding_mask=padding_mask, cache=cache,
            context=context, context_padding_mask=context_padding_mask, document_ids=document_ids,
        )
        return self.lm_head(hidden)

    CONFIG_FILE = CONFIG_FILE
    WEIGHTS_FILE = LEGACY_WEIGHTS_FILE

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` (the :class:`TransformerConfig` as JSON, plus the name and SHA-256 of the
        weights file) and the state dict (encoder parameters included) into ``directory`` (created if
        needed); returns the directory.

        The save is atomic and consistent (:func:`pe_toolkit.checkpoint.save_checkpoint`): a kill or a
        full disk in the middle leaves the previous checkpoint loadable, and a failure raises an
        ``OSError`` naming the file and the cause.
        """
        return save_checkpoint(directory, dataclasses.asdict(self.config), self.state_dict())

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, map_location: str | torch.device | None = None) -> Transformer:
        """The model :meth:`save_pretrained` wrote (weights loaded with ``weights_only=True`` and checked
        against the recorded SHA-256), in eval mode."""
        directory = Path(directory)
        name, fields = read_manifest(directory)
        fields.pop(WEIGHTS_ENTRY, None)
        known = {f.name for f in dataclasses.fields(TransformerConfig)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"{directory / cls.CONFIG_FILE} has fields TransformerConfig does not know: {unknown}")
        fields, state = read_checkpoint(directory, map_location=map_location)
        weights_file = directory / name
        model = cls(TransformerConfig(**fields))
        reference = next(iter(state.values()))
        model = model.to(device=reference.device, dtype=reference.dtype)
        try:
            model.load_state_dict(state)
        except RuntimeError as error:  # missing / unexpected keys, wrong shapes
            weights, config = weights_file, directory / cls.CONFIG_FILE
            raise ValueError(f"{weights} does not fit {config}: {error}") from None
        return model.eval()

    @torch.no_grad()
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        context: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        """Continue ``prompt (B, L)`` by ``max_new_tokens`` tokens with a KV cache.

        Greedy when ``temperature == 0`` (default); otherwise samples from
        ``softmax(logits / temperature)``, restricted to the ``top_k`` most likely tokens if given.
        Positions continue past the prompt. ``context`` / ``context_padding_mask`` are passed to
        every step (encoder-decoder models). Returns ``(B, L + max_new_tokens)``.

        ``attention_mask (B, L)`` (1 / True for real tokens, int or bool as in Hugging Face) decodes a
        batch of left-padded prompts of different lengths: positions start at each prompt's first real
        token, padding is never attended, and each row continues as its prompt would alone.
        """
        if not self.config.causal:
            raise ValueError("generate needs a causal model (config.causal=True)")
        if self.token_embedding is None:
            raise ValueError("this Transformer has vocab_size=None: generate needs token ids")
        if not isinstance(prompt, Tensor):
            raise TypeError(f"prompt must be a torch.Tensor of token ids, got {type(prompt).__name__}")
        if prompt.dim() != 2 or prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
            raise ValueError(f"prompt must be an integer tensor of shape (B, L), got shape {tuple(prompt.shape)} "
                             f"{prompt.dtype} (a single prompt of L tokens is prompt[None])")
        if prompt.shape[0] == 0 or prompt.shape[1] == 0:
            raise ValueError(f"prompt must hold at least one row and one token, got shape {tuple(prompt.shape)}")
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        check_float("temperature", temperature, positive=False, minimum=0.0)
        if top_k is not None:
            check_int("top_k", top_k)
        padding = positions = None
        if attention_mask is not None:
            padding = check_attention_mask(attention_mask, tuple(prompt.shape))
            positions = (padding.long().cumsum(-1) - 1).clamp(min=0)  # (B, L): 0 at each first real token
        was_training = self.training
        self.eval()
        try:
            return self._generate(prompt, max_new_tokens, temperature, top_k, generator, context,
                                  context_padding_mask, padding, positions)
        finally:
            self.train(was_training)

    def _generate(self, prompt: Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
                  generator: torch.Generator | None, context: Tensor | None, context_padding_mask: Tensor | None,
                  padding: Tensor | None, positions: Tensor | None) -> Tensor:
        cache = self.new_cache(max_length=prompt.shape[1] + max_new_tokens)  # allocated once, exactly
        out = prompt
        memory = {"context": context, "context_padding_mask": context_padding_mask}
        logits = self(prompt, positions=positions, padding_mask=padding, cache=cache, **memory)[:, -1]
        for step in range(max_new_tokens):
            if temperature == 0:
                next_token = logits.argmax(-1, keepdim=True)
            else:
                scaled = logits / temperature
                if top_k is not None:
                    kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
                    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
                next_token = torch.multinomial(scaled.softmax(-1), 1, generator=generator)
            out = torch.cat((out, next_token), dim=1)
            if step + 1 < max_new_tokens:
                if padding is None:
                    logits = self(next_token, cache=cache, **memory)[:, -1]
                else:
                    positions = positions[:, -1:] + 1
                    padding = torch.cat((padding, padding.new_ones(padding.shape[0], 1)), dim=1)
                    logits = self(next_token, positions=positions, padding_mask=padding, cache=cache, **memory)[:, -1]
        return out


def check_attention_mask(attention_mask: Tensor, shape: tuple[int, int]) -> Tensor:
    """Validate a Hugging Face style ``attention_mask`` of left-padded prompts; return it as bool.

    Raises:
        TypeError: not a bool or integer tensor.
        ValueError: wrong shape, values other than 0 / 1, padding after a real token (only left
            padding can be decoded), or a prompt with no real token.
    """
    if not isinstance(attention_mask, Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer (1 = real token), got dtype {attention_mask.dtype}")
    if tuple(attention_mask.shape) != shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected the prompt's {shape}")
    if attention_mask.dtype != torch.bool:
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token)")
        attention_mask = attention_mask == 1
    if bool((attention_mask[:, :-1] & ~attention_mask[:, 1:]).any()):
        raise ValueError("attention_mask has padding after a real token: generate decodes left-padded prompts only")
    if not bool(attention_mask[:, -1].all()):
        raise ValueError("attention_mask: every prompt needs at least one real token")
    return attention_mask
