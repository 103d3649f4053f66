"""Position-aware LRP (PA-LRP) for :class:`pe_toolkit.nn.Transformer`: token and position relevance.

Bakish, Zimerman, Chefer, Wolf 2025, "Revisiting LRP: Positional Attribution as the Missing
Ingredient for Transformer Explainability", arXiv:2506.02138, on top of AttnLRP (Achtibat et al.
2024, arXiv:2402.05602). The input space is (token, position) pairs: the positional encoding that
enters the network is an input of its own and receives relevance, so that

    sum(token relevance) + sum(position relevance) + absorbed = explained logit,

where *absorbed* is what the rules themselves do not pass on (the softmax rule's Taylor remainder,
the epsilon stabiliser and parameter biases; see :mod:`pe_toolkit.explain.rules`). Plain LRP holds
the positional inputs constant and loses their share (the paper's Lemma 3.1).

The model is re-run functionally with its own weights (nothing in the model changes); positions
enter at the three hooks of the architecture:

* ``embed`` (sinusoidal, learned, ...): ``x = E + P`` with the epsilon rule, ``R_P = P R_x / (E + P)``.
  Any additive ``embed`` hook is supported (checked numerically).
* ``rotate`` (RoPE and its scalings, xPos): ``q~ = q * cos + rot(q) * sin`` with the epsilon rule on
  ``+`` and the uniform rule on each ``*``, so half of each product's relevance goes to the cos / sin
  (times xPos scale) tables, per layer and per query and key position. NoPE temperature / HeadScale
  scale queries by a constant (identity rule); BAM's Scalable-Softmax factor ``log(n_i) s_h`` is a
  positional factor (uniform rule).
* ``bias`` (ALiBi, T5, KERPLE, FIRE, Sandwich, BAM): logits ``= q.k / sqrt(d) + b`` with the epsilon
  rule; the bias of each (query, key) pair is an input, split half to the query position and half to
  the key position for the per-position score (the full pair map is kept).

QK-norm (per-head RMSNorm on queries and keys) takes the identity rule like every normalisation.
Unsupported: content-dependent biases (CoPE), cross-attention, latent attention (MLA), and any module
other than those of :class:`~pe_toolkit.nn.TransformerBlock`; these raise ``TypeError`` naming the module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    PositionalEncoding,
    PositionBiasEncoding,
    causal_visibility,
    check_positions,
    default_positions,
)
from pe_toolkit.encoders.bayesian import BAMSSMax
from pe_toolkit.encoders.rotary import RotaryEncoding
from pe_toolkit.encoders.temperature import TemperatureNoPE
from pe_toolkit.explain import rules
from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.block import MLP, TransformerBlock
from pe_toolkit.nn.transformer import Transformer

SCORE_KINDS = ("pa_lrp", "token", "signed")


@dataclass
class Attribution:
    """Relevance of one explained logit per example, over tokens and positions.

    Attributes:
        logit: the explained logit ``f(x)``, ``(B,)``.
        token: token-embedding relevance per input position, ``(B, L)`` (summed over features).
        position_terms: positional relevance per input position, ``name -> (B, L)``: ``"embed"`` (the
            absolute PE at the input), ``"layer{i}.cos"`` / ``"layer{i}.sin"`` (RoPE tables, query and
            key side), ``"layer{i}.scale"`` (a positional query factor), ``"layer{i}.bias"`` (an
            additive bias, half to the query and half to the key position). Empty for plain LRP.
        bias_maps: per layer with a positional bias, the pair relevance ``(B, Lq, Lk)`` summed over heads.
        absorbed: relevance not passed to any input, ``tag -> (B,)`` (see ``rules.LEDGER_TAGS``).
        position_aware: True for PA-LRP, False for plain LRP (positions held constant).
        attention: attention probabilities per layer, ``(B, H, L, L)`` each (for rollout and plots).
    """

    logit: Tensor
    token: Tensor
    position_terms: dict[str, Tensor] = field(default_factory=dict)
    bias_maps: dict[str, Tensor] = field(default_factory=dict)
    absorbed: dict[str, Tensor] = field(default_factory=dict)
    position_aware: bool = True
    attention: list[Tensor] = field(default_factory=list)

    @property
    def position(self) -> Tensor:
        """Total positional relevance per input position ``(B, L)`` (signed sum of the terms)."""
        total = torch.zeros_like(self.token)
        for term in self.position_terms.values():
            total = total + term
        return total

    def total(self) -> Tensor:
        """``sum(token) + sum(position)`` per example, ``(B,)``."""
        return self.token.sum(-1) + self.position.sum(-1)

    def total_absorbed(self) -> Tensor:
        """Relevance kept by the rules, ``(B,)``."""
        return sum(self.absorbed.values(), torch.zeros_like(self.logit))

    def conservation(self) -> dict[str, Tensor]:
        """Conservation per example ``(B,)`` each, as the bookkeeping identity and as fractions of the logit.

        * ``identity_residual``: ``|tokens + positions + absorbed - logit| / |logit|``: the ledger balances
          (0 up to rounding, for PA-LRP and plain LRP alike; plain LRP books the positional share it
          drops as absorbed, ``"ignored_position"``);
        * ``token_fraction``, ``position_fraction``: ``sum(token) / logit``, ``sum(position) / logit``;
        * ``input_fraction``: their sum, the fraction of the logit that reaches the inputs (1 = the
          paper's conservation, ``sum R_in = f(x)``);
        * ``absorbed_fraction``: ``absorbed / logit`` (softmax remainder, stabiliser, biases, and for
          plain LRP the ignored positions), so ``input_fraction + absorbed_fraction = 1``.
        """
        logit = self.logit
        token, position = self.token.sum(-1), self.position.sum(-1)
        absorbed = self.total_absorbed()
        token_fraction, position_fraction = token / logit, position / logit
        return {
            "identity_residual": (token + position + absorbed - logit).abs() / logit.abs(),
            "token_fraction": token_fraction,
            "position_fraction": position_fraction,
            # the sum of the two fractions as stated ((token + position) / logit rounds differently by an ulp or two)
            "input_fraction": token_fraction + position_fraction,
            "absorbed_fraction": absorbed / logit,
        }

    def scores(self, kind: str = "pa_lrp") -> Tensor:
        """One score per input position ``(B, L)`` for ranking / plotting.

        ``"pa_lrp"``: the paper's combination (``NLP_demo.py``): token relevance plus, for every
        positional term (the input PE, each layer's cos and sin, each layer's bias), its absolute
        value. ``"token"``: token relevance only. ``"signed"``: token plus signed position relevance.
        """
        if kind not in SCORE_KINDS:
            raise ValueError(f"kind must be one of {SCORE_KINDS}, got {kind!r}")
        if kind == "token":
            return self.token
        if kind == "signed":
            return self.token + self.position
        return self.token + sum((t.abs() for t in self.position_terms.values()), torch.zeros_like(self.token))


# --------------------------------------------------------------------------------------- checks
_ATTENTION_CHILDREN = {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm", "encoding"}
_NORMS = (nn.RMSNorm, nn.LayerNorm)


def _unsupported(path: str, module: object, allowed: str) -> TypeError:
    return TypeError(f"explain: unsupported layer {path} ({type(module).__name__}); supported: {allowed}")


def _embedded_tokens(model, tokens: Tensor, dtype: torch.dtype) -> Tensor:
    """``model.embed_tokens(tokens)`` computed in ``dtype`` (the embedding table cast first, not the output)."""
    table = model.token_embedding
    original = table.weight.dtype
    try:
        table.to(dtype)
        return model.embed_tokens(tokens).to(dtype)
    finally:
        table.to(original)


def _overrides(encoding: PositionalEncoding, hook: str) -> bool:
    return getattr(type(encoding), hook) is not getattr(PositionalEncoding, hook)


def check_encoding(encoding: PositionalEncoding, path: str = "encoding") -> None:
    """Raise ``TypeError`` unless PA-LRP knows how positions enter through ``encoding``'s hooks."""
    if not isinstance(encoding, PositionalEncoding):
        raise _unsupported(path, encoding, "a PositionalEncoding")
    if _overrides(encoding, "rotate"):
        plain_rope = isinstance(encoding, RotaryEncoding) and all(
            getattr(type(encoding), h) is getattr(RotaryEncoding, h) for h in ("rotate", "rotate_one", "cos_sin")
        )
        known = (type(encoding).rotate is TemperatureNoPE.rotate) or (type(encoding).rotate is BAMSSMax.rotate)
        if not (plain_rope or known):
            raise _unsupported(
                f"{path}.rotate", encoding,
                "RoPE (RotaryEncoding and its scalings, xPos), nope_temperature, bam_ssmax",
            )
    if _overrides(encoding, "bias"):
        if not (isinstance(encoding, PositionBiasEncoding) and type(encoding).bias is PositionBiasEncoding.bias):
            raise _unsupported(
                f"{path}.bias", encoding,
                "biases that depend on positions only (PositionBiasEncoding: alibi, t5, kerple, fire, sandwich, bam); "
                "content-dependent biases such as CoPE have no positional input to attribute to",
            )


def check_model(model: nn.Module) -> Transformer:
    """Raise ``TypeError`` naming the first module PA-LRP cannot propagate through; return the model."""
    if not isinstance(model, Transformer):
        raise TypeError(f"explain: model must be a pe_toolkit.nn.Transformer, got {type(model).__name__}")
    if model.token_embedding is None or model.lm_head is None:
        raise TypeError("explain: the model needs a token embedding and an output head (vocab_size is None)")
    if model.config.cross_attention:
        raise TypeError("explain: cross-attention models are not supported (cross_attention=True)")
    for i, enc in enumerate(model.encodings):
        check_encoding(enc, f"encodings.{i}")
    if not isinstance(model.final_norm, _NORMS):
        raise _unsupported("final_norm", model.final_norm, "RMSNorm, LayerNorm")
    for i, block in enumerate(model.blocks):
        path = f"blocks.{i}"
        if type(block) is not TransformerBlock:
            raise _unsupported(path, block, "TransformerBlock")
        if block.cross_attn is not None:
            raise _unsupported(f"{path}.cross_attn", block.cross_attn, "no cross-attention")
        for name in ("attn_norm", "mlp_norm"):
            if not isinstance(getattr(block, name), _NORMS):
                raise _unsupported(f"{path}.{name}", getattr(block, name), "RMSNorm, LayerNorm")
        attn = block.attn
        if type(attn) is not MultiHeadAttention:
            raise _unsupported(f"{path}.attn", attn, "MultiHeadAttention")
        for name, child in attn.named_children():
            if name not in _ATTENTION_CHILDREN:
                raise _unsupported(f"{path}.attn.{name}", child, f"children {sorted(_ATTENTION_CHILDREN)}")
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if type(getattr(attn, name)) is not nn.Linear:
                raise _unsupported(f"{path}.attn.{name}", getattr(attn, name), "nn.Linear")
        for name in ("q_norm", "k_norm"):
            norm = getattr(attn, name, None)
            if norm is not None and not isinstance(norm, nn.RMSNorm):
                raise _unsupported(f"{path}.attn.{name}", norm, "RMSNorm or None")
        if attn.encoding is not None:
            check_encoding(attn.encoding, f"{path}.attn.encoding")
        mlp = block.mlp
        if type(mlp) is not MLP:
            raise _unsupported(f"{path}.mlp", mlp, "pe_toolkit.nn.block.MLP (swiglu or gelu)")
        for name in ("up", "gate", "down"):
            layer = getattr(mlp, name)
            if layer is not None and type(layer) is not nn.Linear:
                raise _unsupported(f"{path}.mlp.{name}", layer, "nn.Linear")
    return model


# ------------------------------------------------------------------------------ functional pass
class _Pass:
    """One relevance-carrying forward pass of a Transformer (see :func:`explain`)."""

    def __init__(self, model: Transformer, dtype: torch.dtype, eps: float, aware: bool,
                 ledger: rules.RelevanceLedger) -> None:
        self.model, self.dtype, self.eps, self.aware, self.ledger = model, dtype, eps, aware, ledger
        self.leaves: dict[str, tuple[Tensor, str]] = {}  # name -> (leaf, how to reduce it to (B, L))
        self.attention: list[Tensor] = []

    def w(self, p: Tensor | None) -> Tensor | None:
        return None if p is None else p.detach().to(self.dtype)

    def leaf(self, name: str, value: Tensor, reduce: str) -> Tensor:
        value = value.detach().to(self.dtype).contiguous().clone().requires_grad_(self.aware)
        if self.aware:
            self.leaves[name] = (value, reduce)
        return value

    def linear(self, x: Tensor, layer: nn.Linear) -> Tensor:
        return rules.linear(x, self.w(layer.weight), self.w(layer.bias), eps=self.eps, ledger=self.ledger)

    def norm(self, x: Tensor, norm: nn.Module) -> Tensor:
        """Identity rule through the normaliser (treated as a constant scaling), epsilon rule on the affine."""
        shape = norm.normalized_shape
        if isinstance(norm, nn.RMSNorm):
            n = rules.passthrough(x, lambda t: F.rms_norm(t, shape, None, norm.eps))
            return rules.affine(n, self.w(norm.weight), None, eps=self.eps, ledger=self.ledger)
        n = rules.passthrough(x, lambda t: F.layer_norm(t, shape, None, None, norm.eps))
        return rules.affine(n, self.w(norm.weight), self.w(norm.bias), eps=self.eps, ledger=self.ledger)

    def rope(self, x: Tensor, enc: RotaryEncoding, pos: Tensor, length, inverse: bool, name: str) -> Tensor:
        b, h, seq, _ = x.shape
        cos, sin = enc.cos_sin(pos, self.dtype, length=length)
        if enc.xpos:
            scale = enc._xpos_scale(pos, self.dtype)
            scale = scale.reciprocal() if inverse else scale
            cos, sin = cos * scale, sin * scale
        half = enc.rotary_dim // 2
        cos = self.leaf(f"{name}.cos", cos.reshape(-1, seq, half)[:, None].expand(b, h, seq, half), "heads_pairs")
        sin = self.leaf(f"{name}.sin", sin.reshape(-1, seq, half)[:, None].expand(b, h, seq, half), "heads_pairs")
        rd = enc.rotary_dim
        x_rot, x_pass = (x[..., :rd], x[..., rd:]) if rd < x.shape[-1] else (x, None)
        if enc.interleaved:
            cos_full, sin_full = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        else:
            cos_full, sin_full = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        out = rules.add(
            rules.multiply(x_rot, cos_full),
            rules.multiply(rules.rotate_half(x_rot, interleaved=enc.interleaved), sin_full),
            eps=self.eps, ledger=self.ledger,
        )
        return out if x_pass is None else torch.cat((out, x_pass), dim=-1)

    def rotate(self, q: Tensor, k: Tensor, enc: PositionalEncoding, pos: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        if isinstance(enc, RotaryEncoding):
            length = enc.current_length(pos, pos) if enc.length_dependent else None
            q = self.rope(q, enc, pos, length, False, f"layer{layer}.q")
            k = self.rope(k, enc, pos, length, True, f"layer{layer}.k")
        elif isinstance(enc, BAMSSMax):
            factor = enc.ssmax_factor(pos, k.shape[-2], self.dtype)
            factor = self.leaf(f"layer{layer}.q.scale", factor.expand(q.shape[0], -1, -1, -1), "heads_pairs")
            q = rules.multiply(q, factor)
        elif isinstance(enc, TemperatureNoPE):
            scale = self.w(enc.head_scale).view(-1, 1, 1)
            q = rules.passthrough(q, lambda t: t * scale)  # a constant per head: identity rule
        return q, k

    def attention_block(self, x: Tensor, attn: MultiHeadAttention, enc: PositionalEncoding, pos: Tensor,
                        layer: int) -> Tensor:
        b, seq, _ = x.shape
        hd = attn.head_dim
        q = self.linear(x, attn.q_proj).view(b, seq, attn.num_heads, hd).transpose(1, 2)
        k = self.linear(x, attn.k_proj).view(b, seq, attn.num_kv_heads, hd).transpose(1, 2)
        v = self.linear(x, attn.v_proj).view(b, seq, attn.num_kv_heads, hd).transpose(1, 2)
        if getattr(attn, "q_norm", None) is not None:
            q, k = self.norm(q, attn.q_norm), self.norm(k, attn.k_norm)
        q, k = self.rotate(q, k, enc, pos, layer)
        groups = attn.num_heads // attn.num_kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        logits = rules.matmul(q, k.transpose(-1, -2), scale=1.0 / math.sqrt(hd), eps=self.eps, ledger=self.ledger)
        if isinstance(enc, PositionBiasEncoding):
            with torch.no_grad():
                bias = enc.position_bias(pos, pos, torch.float64 if self.dtype == torch.float64 else torch.float32)
            bias = self.leaf(f"layer{layer}.bias", bias.to(self.dtype).expand_as(logits), "pairs")
            logits = rules.add(logits, bias, eps=self.eps, ledger=self.ledger, constant_tag="ignored_position")
        if attn.causal:
            visible = causal_visibility(seq, seq, x.device)
        else:
            visible = torch.ones(seq, seq, dtype=torch.bool, device=x.device)
        probs = rules.softmax(logits, visible, ledger=self.ledger)
        self.attention.append(probs.detach())
        out = rules.matmul(probs, v, eps=self.eps, ledger=self.ledger)
        return self.linear(out.transpose(1, 2).reshape(b, seq, attn.dim), attn.o_proj)

    def mlp(self, x: Tensor, mlp: MLP) -> Tensor:
        if mlp.gate is not None:
            gate = rules.passthrough(self.linear(x, mlp.gate), F.silu)
            hidden = rules.multiply(gate, self.linear(x, mlp.up))
        else:
            hidden = rules.passthrough(self.linear(x, mlp.up), F.gelu)
        return self.linear(hidden, mlp.down)

    def run(self, tokens: Tensor, positions: Tensor, target: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
        model = self.model
        b, seq = tokens.shape
        # the model's own input transform (e.g. scale_embeddings' sqrt(dim)): relevance starts at what the
        # blocks receive, so the explained function is the model's
        with torch.no_grad():
            embedded = _embedded_tokens(model, tokens, self.dtype)
        tokens_leaf = embedded.clone().requires_grad_(True)
        x = tokens_leaf
        first = model.encodings[0]
        if _overrides(first, "embed"):
            with torch.no_grad():
                pe = first.embed(torch.zeros_like(embedded), positions).to(self.dtype)
                check = first.embed(embedded, positions).to(self.dtype)
            scale = embedded.abs().max() + pe.abs().max()
            if not torch.allclose(check, embedded + pe, rtol=0.0, atol=1e-4 * float(scale) + 1e-12):
                raise TypeError(
                    f"explain: the embed hook of {type(first).__name__} is not additive (embed(x) != x + embed(0)); "
                    "PA-LRP splits relevance at an additive input sum only"
                )
            pe = self.leaf("embed", pe.expand(b, seq, -1), "features")
            x = rules.add(x, pe, eps=self.eps, ledger=self.ledger, constant_tag="ignored_position")
        for i, block in enumerate(model.blocks):
            enc = model.encoding_for_layer(i)
            x = rules.add(x, self.attention_block(self.norm(x, block.attn_norm), block.attn, enc, positions, i),
                          eps=self.eps, ledger=self.ledger)
            x = rules.add(x, self.mlp(self.norm(x, block.mlp_norm), block.mlp), eps=self.eps, ledger=self.ledger)
        rows = torch.arange(b, device=tokens.device)
        hidden = self.norm(x[rows, index], model.final_norm)                          # (B, D)
        head = model.lm_head.weight.detach().to(self.dtype)[target]                    # (B, D)
        logit = _RowDot.apply(hidden, head, self.eps, self.ledger)
        return logit, tokens_leaf


class _RowDot(torch.autograd.Function):
    """``z_b = h_b . w_b`` (the explained logit) with the epsilon rule; ``w`` is constant."""

    @staticmethod
    def forward(ctx, h, w, eps, ledger):
        z = (h * w).sum(-1)
        ctx.save_for_backward(h, w, z)
        ctx.eps, ctx.ledger = eps, ledger
        return z

    @staticmethod
    def backward(ctx, relevance):
        h, w, z = ctx.saved_tensors
        r_h = h * w * rules.divide(relevance, z, ctx.eps)[:, None]
        rules._record(ctx.ledger, "stabiliser", relevance[:, None], r_h)
        return r_h, None, None, None


def _reduce(relevance: Tensor, how: str) -> Tensor:
    """A positional leaf's relevance -> per input position ``(B, L)``."""
    if how == "features":  # (B, L, D)
        return relevance.sum(-1)
    if how == "heads_pairs":  # (B, H, L, d) -> (B, L)
        return relevance.sum((1, 3))
    if how == "pairs":  # (B, H, Lq, Lk): half to the query, half to the key
        pair = relevance.sum(1)
        return 0.5 * pair.sum(-1) + 0.5 * pair.sum(-2)
    raise AssertionError(how)


def check_finite_parameters(model: nn.Module) -> None:
    """``ValueError`` naming the first parameter of ``model`` that holds NaN or inf.

    A NaN weight makes every relevance NaN, and ``NaN`` relevances sum, sort and plot without an error; the
    explainers refuse such a model instead (a diverged run: see :class:`~pe_toolkit.training.NonFiniteStop`).
    """
    for name, parameter in model.named_parameters():
        if parameter.is_floating_point() and not bool(torch.isfinite(parameter).all()):
            count = int((~torch.isfinite(parameter)).sum())
            raise ValueError(f"model: parameter {name!r} holds NaN or inf ({count} of {parameter.numel()} entries); "
                             f"a model with non-finite weights has no relevance to explain")


def _check_index(name: str, value, size: int, batch: int, device: torch.device, *, negative: bool) -> Tensor:
    if isinstance(value, bool) or not isinstance(value, (int, Tensor)):
        raise TypeError(f"{name} must be an int or a LongTensor of shape ({batch},), got {type(value).__name__}")
    t = torch.as_tensor(value, device=device)
    if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    if t.dim() == 0:
        t = t.expand(batch)
    if tuple(t.shape) != (batch,):
        raise ValueError(f"{name} must be an int or have shape ({batch},), got shape {tuple(t.shape)}")
    low = -size if negative else 0
    if t.numel() and (t.min() < low or t.max() >= size):
        raise ValueError(f"{name} out of range: values must lie in [{low}, {size - 1}], got "
                         f"[{int(t.min())}, {int(t.max())}]")
    return t.long() % size


def explain(
    model: Transformer,
    tokens: Tensor,
    target: int | Tensor,
    *,
    index: int | Tensor = -1,
    positions: Tensor | None = None,
    epsilon: float = 1e-6,
    position_aware: bool = True,
    dtype: torch.dtype | None = None,
) -> Attribution:
    """Relevance of the logit ``model(tokens)[b, index_b, target_b]`` over tokens and positions.

    Args:
        model: a :class:`~pe_toolkit.nn.Transformer` with a token vocabulary (checked by :func:`check_model`).
        tokens: ``(B, L)`` integer ids in ``[0, vocab_size)``.
        target: the explained output class, an int or ``(B,)`` ids in ``[0, vocab_size)``.
        index: the output position whose logit is explained, an int or ``(B,)`` (negative counts from the end).
        positions: ``(L,)`` or ``(B, L)`` positions (default ``arange(L)``).
        epsilon: the epsilon rule's stabiliser (>= 0).
        position_aware: PA-LRP (True) or plain AttnLRP with positions held constant (False).
        dtype: compute dtype (default: the model's parameter dtype); float64 for exact conservation checks.

    Returns:
        an :class:`Attribution`; ``attr.total() + attr.total_absorbed() == attr.logit`` up to rounding.
        The pass is the model's evaluation-mode function (no dropout), over the whole sequence at
        once (no KV cache, no padding mask).

    Raises:
        TypeError: unsupported model or layer, non-integer tokens / target / index.
        ValueError: token ids, target or index out of range; bad shapes; a negative or non-finite epsilon;
            a model parameter holding NaN or inf (named); a non-finite explained logit.
    """
    check_model(model)
    check_finite_parameters(model)
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be an integer tensor of shape (B, L), got "
                        f"{getattr(tokens, 'shape', type(tokens).__name__)} {getattr(tokens, 'dtype', '')}")
    vocab = model.config.vocab_size
    if tokens.numel() == 0:
        raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(
            f"tokens must lie in [0, vocab_size={vocab}), got range [{int(tokens.min())}, {int(tokens.max())}]"
        )
    b, seq = tokens.shape
    target_t = _check_index("target", target, vocab, b, tokens.device, negative=False)
    index_t = _check_index("index", index, seq, b, tokens.device, negative=True)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    positions = default_positions(seq, 0, tokens.device) if positions is None else positions
    check_positions("positions", positions, seq, b)
    dtype = model.token_embedding.weight.dtype if dtype is None else dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")

    ledger = rules.RelevanceLedger(b, dtype, tokens.device)
    run = _Pass(model, dtype, float(epsilon), position_aware, ledger)
    with torch.enable_grad():
        logit, tokens_leaf = run.run(tokens, positions, target_t, index_t)
        leaves = [tokens_leaf] + [leaf for leaf, _ in run.leaves.values()]
        if not bool(torch.isfinite(logit).all()):
            raise ValueError(f"explain: the explained logit is not finite ({logit.detach().tolist()}) in {dtype}; the "
                             f"model overflows on these tokens (try dtype=torch.float64)")
        relevances = torch.autograd.grad(logit, leaves, grad_outputs=logit.detach(), allow_unused=True)
    token = relevances[0].sum(-1) if relevances[0] is not None else torch.zeros(b, seq, dtype=dtype)
    terms: dict[str, Tensor] = {}
    bias_maps: dict[str, Tensor] = {}
    for (name, (leaf, how)), rel in zip(run.leaves.items(), relevances[1:]):
        rel = torch.zeros_like(leaf) if rel is None else rel
        key = name.replace(".q.", ".").replace(".k.", ".")
        per_position = _reduce(rel, how)
        terms[key] = terms[key] + per_position if key in terms else per_position
        if how == "pairs":
            bias_maps[name] = rel.sum(1)
    return Attribution(
        logit=logit.detach(), token=token.detach(), position_terms={k: v.detach() for k, v in terms.items()},
        bias_maps=bias_maps, absorbed=dict(ledger.totals), position_aware=position_aware, attention=run.attention,
    )
