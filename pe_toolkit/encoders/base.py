"""The base class of every positional encoding: three hooks, all identity by default.

A Transformer touches positions at three points (see ARCHITECTURE.md):

* ``embed(x, positions) -> x`` once on the input features,
* ``rotate(q, k, q_pos, k_pos) -> (q, k)`` on queries and keys in each attention layer,
* ``bias(q, k, q_pos, k_pos) -> Tensor | None`` added to the scaled attention logits.

The base class implements all three as identity / ``None``, so it *is* NoPE (Kazemnejad et al. 2023,
arXiv:2305.19466: the causal mask alone carries position). Encoders override only what they need.

Shapes:
    x: ``(B, L, dim)``; q: ``(B, H, Lq, head_dim)``; k: ``(B, H_kv, Lk, head_dim)``;
    positions: ``(L,)`` or ``(B, L)`` (plus trailing feature dims for vector positions);
    bias: broadcastable to ``(B, H, Lq, Lk)``.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.registry import register_encoder


def check_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an int >= ``minimum``, else raise TypeError / ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_float(name: str, value: Any, *, positive: bool = True, minimum: float | None = None) -> float:
    """Return ``value`` as a finite float; ``positive`` requires > 0, ``minimum`` requires >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def default_positions(length: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """``arange(offset, offset + length)``: the default integer positions, shape ``(length,)``."""
    return torch.arange(offset, offset + length, device=device)


def check_positions(name: str, positions: Tensor, length: int, batch: int, *, vector_dims: int = 0,
                    values: bool = True) -> Tensor:
    """Validate positions of shape ``(L,)`` or ``(B, L)`` (plus ``vector_dims`` trailing dims).

    ``values=False`` checks type and shape only (no host synchronisation): the caller then checks the
    values itself, e.g. with the other entry checks in one read (:func:`~pe_toolkit.nn.position_state.read_facts`).

    Raises:
        TypeError: if ``positions`` is not a real-valued tensor.
        ValueError: if its shape does not match ``length`` / ``batch``, or it holds NaN / inf.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must hold integer or float positions, got dtype {positions.dtype}")
    core = positions.dim() - vector_dims
    shape = tuple(positions.shape)
    if core == 1:
        ok = shape[0] == length
    elif core == 2:
        ok = shape[0] == batch and shape[1] == length
    else:
        ok = False
    if not ok:
        want = f"({length},) or ({batch}, {length})" + (" + vector dims" if vector_dims else "")
        raise ValueError(f"{name} has shape {shape}, expected {want}")
    if values and positions.is_floating_point():
        require(torch.isfinite(positions).all(), f"{name} contains NaN or inf")
    return positions


def takes_bounds(method: Callable) -> Callable:
    """Mark a hook (``embed`` / ``rotate``) that accepts host-known position bounds as keywords
    (``bounds=`` for ``embed``; ``q_bounds=`` / ``k_bounds=`` for ``rotate``): exact ``(min, max)`` of
    integer positions, or ``None``. With them it reads no value from the device (no host
    synchronisation per layer); a subclass that overrides the hook without the mark is called without them."""
    method.takes_bounds = True
    return method


def hook_takes_bounds(encoding: PositionalEncoding, hook: str) -> bool:
    """Whether ``encoding``'s ``hook`` (its class's own method) is marked with :func:`takes_bounds`."""
    return getattr(getattr(type(encoding), hook), "takes_bounds", False)


def tracing() -> bool:
    """Whether ``torch.compile`` is tracing this call (values of tensors are then unknown)."""
    return torch.compiler.is_compiling()


def require(condition: Tensor, message: str, detail: Callable[[], str] | None = None) -> None:
    """Raise ``ValueError(message + detail())`` unless the boolean scalar ``condition`` holds.

    A check on tensor values is a data-dependent branch, which ``torch.compile(fullgraph=True)``
    cannot trace; while it traces (:func:`tracing`), the check becomes an assertion inside the graph
    (``torch._assert_async``), which raises a ``RuntimeError`` with ``message`` when the compiled code
    runs. ``detail`` (eager only) adds the offending values.
    """
    if tracing():
        torch._assert_async(condition, message)
    elif not bool(condition):
        raise ValueError(message + (detail() if detail is not None else ""))


PositionCheck = tuple[Tensor, str, "Callable[[], str] | None"]
"""One value check of positions: ``(condition, message, detail)``, a 0-d bool device tensor not yet read, the
error message and (eager only) a function adding the offending values; see
:meth:`PositionalEncoding.position_checks`."""


def require_all(checks: list[PositionCheck]) -> None:
    """:func:`require` for several checks with one host synchronisation: the first failed one raises."""
    if not checks:
        return
    if tracing():
        for condition, message, _ in checks:
            torch._assert_async(condition, message)
        return
    held = torch.stack([condition.reshape(()).to(torch.bool) for condition, _, _ in checks]).tolist()
    raise_failed(checks, held)


def raise_failed(checks: list[PositionCheck], held: list) -> None:
    """Raise the ``ValueError`` of the first check whose read value in ``held`` is false."""
    for (_, message, detail), ok in zip(checks, held, strict=True):
        if not ok:
            raise ValueError(message + (detail() if detail is not None else ""))


def takes_checked(method: Callable) -> Callable:
    """Mark a hook (``embed``) that accepts ``checked=True`` from a caller that already ran the encoder's
    :meth:`~PositionalEncoding.position_checks` on these positions (in its own single host read); without
    it the hook runs them itself."""
    method.takes_checked = True
    return method


def hook_takes_checked(encoding: PositionalEncoding, hook: str) -> bool:
    """Whether ``encoding``'s ``hook`` (its class's own method) is marked with :func:`takes_checked`."""
    return getattr(getattr(type(encoding), hook), "takes_checked", False)


def require_finite(name: str, x: Tensor) -> None:
    """``ValueError`` naming ``name`` when the floating tensor ``x`` holds NaN or inf (see :func:`require`).

    A NaN entering a layer leaves every later activation NaN without an error; checked where a
    user's float input enters (the Transformer's ``forward_features``, MLA, the explainer).
    """
    if x.is_floating_point() or x.is_complex():
        require(torch.isfinite(x).all(), f"{name} holds NaN or inf values",
                lambda: f" ({int((~torch.isfinite(x)).sum())} of {x.numel()} entries)")


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """``k_pos - q_pos`` for every query/key pair: ``(Lq, Lk)`` or ``(B, Lq, Lk)``.

    Sign convention (as in T5): negative for keys in the past of the query.
    """
    return k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)


def relative_distance_table(q_pos: Tensor, k_pos: Tensor,
                            span: tuple[int, int] | None = None) -> tuple[Tensor, Tensor] | None:
    """The distinct relative distances of integer positions, for a bias that is a function of ``j - i``.

    Returns ``(distances, index)``: ``distances`` ``(n,)`` the integers ``lo..hi`` that
    ``k_pos - q_pos`` can take, and ``index`` (long, shaped like :func:`relative_distance`'s output)
    with ``distances[index] == relative_distance(q_pos, k_pos)``. Evaluating the bias on the ``n``
    distances and gathering costs ``n`` formula evaluations instead of ``Lq * Lk``: for contiguous
    positions ``n = Lq + Lk - 1``, which is what makes long-context evaluation with query blocks cheap.

    Returns ``None`` for float positions (which may be fractional), when the distances span more
    than ``4 (Lq + Lk)`` values (scattered positions, where a table would not save work) and while
    ``torch.compile`` traces (:func:`tracing`). ``span``: see :func:`distance_range`.
    """
    span = distance_range(q_pos, k_pos, span)  # None for float, empty or scattered positions and while tracing
    if span is None:
        return None
    lo, hi = span
    index = k_pos.unsqueeze(-2) - (q_pos.unsqueeze(-1) + lo)
    return torch.arange(lo, hi + 1, device=q_pos.device), index


def distance_range(q_pos: Tensor, k_pos: Tensor, span: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """``(lo, hi)``, the smallest and largest ``k_pos - q_pos`` of integer positions, when a table over
    them pays (at most ``4 (Lq + Lk)`` values); ``None`` for float or empty positions, scattered ones,
    and while ``torch.compile`` traces (the range is a value, not a shape).

    ``span``: the range when the caller already knows it on the host (the ``Transformer`` does, from
    the positions it validated): then no value is read from the device. Without it the range is read
    with one host synchronisation.
    """
    if q_pos.is_floating_point() or k_pos.is_floating_point() or q_pos.numel() == 0 or k_pos.numel() == 0:
        return None
    if tracing():  # the table's size depends on the position values; the compiled pairwise grid fuses anyway
        return None
    if span is None:
        k_lo, k_hi, q_lo, q_hi = torch.stack((k_pos.min(), k_pos.max(), q_pos.min(), q_pos.max())).tolist()
        span = (k_lo - q_hi, k_hi - q_lo)
    lo, hi = span
    if hi - lo + 1 > 4 * (q_pos.shape[-1] + k_pos.shape[-1]):
        return None
    return lo, hi


def relative_table(table: Tensor, q_pos: Tensor, k_pos: Tensor, lo: int) -> tuple[Tensor, int] | None:
    """``(table, offset)`` with ``table[h, key(b, j) - query(b, i) - lo] == table[h, j - i + offset]`` for every
    ``b, i, j``, when the positions are contiguous and the same in every batch row (``q_pos[..., i] = i + a``,
    ``k_pos[..., j] = j + c``: the default positions, also with a KV cache); ``None`` otherwise (packed
    documents, gaps). Reads the positions once on the host.

    Attached to a tabulated :meth:`PositionBiasEncoding.bias_function` as ``relative_table``: with it a tiled
    kernel reads each tile's bias from the table's diagonals instead of gathering pair by pair, and sums a
    learnable table's score gradient along the diagonals (one value per distance) instead of scattering every
    pair into it (:mod:`pe_toolkit.nn.tiled_attention`).
    """
    def shift(pos: Tensor) -> Tensor:  # pos - arange: one constant everywhere iff the positions are contiguous
        return pos - torch.arange(pos.shape[-1], device=pos.device)

    q_shift, k_shift = shift(q_pos), shift(k_pos)
    q_lo, q_hi, k_lo, k_hi = torch.stack((q_shift.min(), q_shift.max(), k_shift.min(), k_shift.max())).tolist()
    if q_lo != q_hi or k_lo != k_hi:
        return None
    return table, int(k_lo - q_lo - lo)


def diagonal_sums(ds: Tensor, groups: int) -> Tensor:
    """Score gradients of tiles ``(H_kv, T * G, Tk)`` (summed over the batch) summed along each diagonal:
    ``(H, T + Tk - 1)``, entry ``c`` the sum over the pairs with ``j - i = c - (T - 1)`` (tile-local indices).

    The gradient of a bias ``table[h, j - i + offset]`` (a relative bias with contiguous positions) in ``T + Tk - 1``
    values per head: each row ``i``, padded by ``T - 1`` zeros on both sides, is read ``i`` places further along
    (one strided view), so that column ``c`` holds key ``i + c - (T - 1)`` of every row.
    """
    kv_heads, rows, keys = ds.shape
    t = rows // groups
    x = ds.view(kv_heads, t, groups, keys).transpose(1, 2).reshape(kv_heads * groups, t, keys)
    width = keys + 2 * (t - 1)
    padded = torch.nn.functional.pad(x, (t - 1, t - 1)).contiguous()
    return padded.as_strided((kv_heads * groups, t, t + keys - 1), (t * width, width + 1, 1)).sum(1)


def position_lookup(positions: Tensor, vector_dims: int = 0) -> Callable[[Tensor, Tensor], Tensor]:
    """``lookup(b, i) = positions[b, i]`` for ``(B, L, ...)`` positions and ``positions[i]`` for ``(L, ...)``.

    Index tensors ``b``, ``i`` broadcast together; ``vector_dims`` trailing feature dims come along.
    For the pointwise :meth:`PositionalEncoding.bias_function` of an encoder.
    """
    batched = positions.dim() == 2 + vector_dims
    table = positions if batched else positions.unsqueeze(0)

    def lookup(b: Tensor, i: Tensor) -> Tensor:
        return table[b if batched else torch.zeros_like(b), i]

    return lookup


BiasFunction = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``f(batch, head, query index, key index) -> bias``, elementwise; see :meth:`PositionalEncoding.bias_function`."""


ScoreFunction = Callable[[Tensor, Tensor, Tensor, torch.dtype, int], Tensor]
"""``score(head, q_pos, k_pos, dtype, num_keys)``, elementwise; see :meth:`PositionBiasEncoding.score`."""


def score_bias(score: ScoreFunction, num_heads: int, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, *,
               shift_invariant: bool, span: tuple[int, int] | None = None) -> Tensor:
    """A pointwise ``score`` on every (head, query, key) of ``(L,)`` / ``(B, L)`` positions: ``(B or 1, H, Lq, Lk)``.

    With ``shift_invariant`` and integer positions, ``score`` runs once per distinct distance
    (:func:`relative_distance_table`) and the values are gathered, which equals the pairwise
    evaluation exactly; otherwise it runs on the broadcast ``(B or 1, H, Lq, Lk)`` grid. ``span``: the
    distances' range when known on the host (:func:`distance_range`).
    """
    heads = torch.arange(num_heads, device=q_pos.device)
    num_keys = k_pos.shape[-1]
    if shift_invariant:
        table = relative_distance_table(q_pos, k_pos, span)
        if table is not None:
            distances, index = table
            values = score(heads[:, None], torch.zeros_like(distances), distances, dtype, num_keys)  # (H, n)
            return heads_first(values.transpose(0, 1)[index])  # (..., Lq, Lk, H) -> (B or 1, H, Lq, Lk)
    query = q_pos.unsqueeze(-1).unsqueeze(-3)  # (..., 1, Lq, 1)
    key = k_pos.unsqueeze(-2).unsqueeze(-3)    # (..., 1, 1, Lk)
    values = score(heads.view(-1, 1, 1), query, key, dtype, num_keys)
    return values if values.dim() == 4 else values.unsqueeze(0)


def bias_on_grid(function: BiasFunction, batch: int, num_heads: int, queries: tuple[int, int],
                 keys: tuple[int, int], device: torch.device | None = None) -> Tensor:
    """A :meth:`PositionalEncoding.bias_function` on the index grid ``(batch, num_heads, queries, keys)``.

    ``queries`` / ``keys``: ``(start, stop)`` index ranges (the whole call, or one tile of it).
    Returns ``(B, H, stop_q - start_q, stop_k - start_k)``.
    """
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.arange(num_heads, device=device).view(1, -1, 1, 1)
    i = torch.arange(*queries, device=device).view(1, 1, -1, 1)
    j = torch.arange(*keys, device=device).view(1, 1, 1, -1)
    return function(b, h, i, j).expand(batch, num_heads, queries[1] - queries[0], keys[1] - keys[0])


def causal_visibility(
    q_len: int, k_len: int, device: torch.device | None = None, offset: int | None = None
) -> Tensor:
    """Bool ``(Lq, Lk)``: query ``i`` sees key ``j`` iff ``j <= i + offset``.

    The default ``offset = Lk - Lq`` makes the queries the last ``Lq`` of the ``Lk`` keys
    (bottom-right alignment), which is what KV-cache decoding needs; a block of queries starting at
    query index ``s`` uses ``offset = s + Lk - Lq_total``.
    """
    offset = k_len - q_len if offset is None else offset
    rows = torch.arange(q_len, device=device).unsqueeze(-1)
    cols = torch.arange(k_len, device=device)
    return cols <= rows + offset


def heads_first(bias: Tensor) -> Tensor:
    """Turn a per-pair bias ``(..., Lq, Lk, H)`` into ``(B or 1, H, Lq, Lk)``."""
    bias = bias.movedim(-1, -3)
    return bias if bias.dim() == 4 else bias.unsqueeze(0)


class PositionalEncoding(nn.Module):
    """Base class of all positional encodings; on its own it is NoPE (no positional information).

    Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
    Transformers", arXiv:2305.19466: a causal decoder without any PE can recover positions.

    Args:
        dim: model width (the features ``x`` that ``embed`` receives).
        num_heads: number of attention heads; must divide ``dim``.
        causal: whether the attention this encoder serves is causal (set by ``Transformer`` from
            its own flag). Some encoders use it (T5 buckets, xPos, CoPE).

    Raises:
        TypeError / ValueError: for a non-int or non-positive ``dim`` / ``num_heads``, or if
            ``num_heads`` does not divide ``dim``.
    """

    registry_name = "nope"

    def __init__(self, dim: int, num_heads: int, *, causal: bool = True) -> None:
        super().__init__()
        check_int("dim", dim)
        check_int("num_heads", num_heads)
        if dim % num_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must divide dim ({dim})")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.causal = causal

    # ----------------------------------------------------------------------------------- hooks
    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Add absolute position information to features ``x`` ``(B, L, dim)``; identity here."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Transform queries ``(B, H, Lq, hd)`` and keys ``(B, Hkv, Lk, hd)``; identity here."""
        return q, k

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive logit bias broadcastable to ``(B, H, Lq, Lk)``, or ``None`` (no bias) here.

        The attention may call it for a subset of the queries (a tile of a memory-bounded backend,
        a KV-cache step): ``q`` and ``q_pos`` are then those queries only, with all the keys. An
        encoder whose class sets ``bias_uses_visibility = True`` (content-dependent positions that
        count keys, e.g. CoPE) is called with one more keyword, ``visible``: bool broadcastable to
        ``(B, 1, Lq, Lk)``, True where the query may attend the key (causal, padding, document and
        window masks together), or ``None`` when every key is visible.
        """
        return None

    bias_uses_visibility = False
    """Whether :meth:`bias` takes the ``visible`` keyword (see there)."""

    bias_reads_key_indices = False
    """Whether the bias of a tile of queries needs the keys' indices in the whole sequence, not only
    their positions (e.g. a per-query row of edge lengths indexed by key): :meth:`bias` then takes
    all queries and keys, and the blocked backend evaluates :meth:`bias_function`, built once on the
    whole call, at each tile's global indices (:func:`bias_on_grid`)."""

    @property
    def acts_in_attention(self) -> bool:
        """Whether :meth:`rotate` or :meth:`bias` do anything: an encoding with only an ``embed`` hook
        acts on the input once, and an attention layer alone would never call it."""
        return type(self).rotate is not PositionalEncoding.rotate or type(self).bias is not PositionalEncoding.bias

    @property
    def causal_only(self) -> bool:
        """Whether the hooks assume keys never follow the query (one-way T5 buckets, CoPE's counts,
        xPos' decay): a bidirectional attention layer refuses such an encoding. False unless overridden."""
        return False

    @property
    def supports_window(self) -> bool:
        """Whether the encoder is exact under sliding-window attention (it depends on no key outside
        the window, e.g. no count of all keys seen); the attention refuses a window otherwise."""
        return True

    @property
    def supports_documents(self) -> bool:
        """Whether the encoder is exact on packed sequences (``document_ids``), given positions that
        restart in each document; the attention refuses packing otherwise. True unless overridden."""
        return True

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction | None:
        """The bias as a function of indices, for attention backends that evaluate it pointwise.

        Returns ``f(b, h, i, j)``: integer index tensors of the batch, the head, the query (into
        ``q`` / ``q_pos``) and the key (into ``k`` / ``k_pos``), broadcast together, to the bias
        values of that broadcast shape (float32, float64 for float64 ``q``). ``f`` must be built
        from elementwise operations and lookups into tensors it holds, so that FlexAttention can
        use it as a ``score_mod``; the dense bias is ``f`` on the full index grid. ``None`` (the
        default) when the encoder has no bias or its bias is not pointwise (CoPE's gate sums): such
        encoders run on the dense and blocked backends only.
        """
        return None

    def position_checks(self, positions: Tensor, name: str = "positions") -> list[PositionCheck]:
        """The value checks this encoder needs on ``positions`` (beyond shape, dtype and finiteness), not read.

        Each is a :data:`PositionCheck`: a 0-d bool device tensor, the message of its ``ValueError`` and an
        optional detail. The public entry points (``Transformer``, a bare ``MultiHeadAttention``,
        :meth:`positional_pattern`) add them to the one host read of their own checks, before any layer
        runs or a cache is written; the ``rotate`` / ``bias`` hooks then read nothing from the device, and an
        ``embed`` marked :func:`takes_checked` is told. None here; an encoder whose positions index a table
        or must satisfy a precondition (a graph's self loops) overrides it. ``name`` names the argument in
        the messages.
        """
        return []

    def example_positions(self, length: int) -> Tensor:
        """Positions of a small example input of ``length`` tokens: ``arange(length)`` here.

        Encoders whose positions are richer than an index (structure labels, boxes, coordinates,
        graph features) override this with a deterministic example of their own format, so that
        :meth:`positional_pattern`, ``pe-toolkit plot`` and the docs gallery can draw every
        registered encoder. Shape: what :meth:`embed`, :meth:`rotate` and
        :meth:`bias` accept for one sequence, e.g. ``(length,)`` or ``(length, F)``.
        """
        return default_positions(check_int("length", length))

    @torch.no_grad()
    def positional_pattern(self, length: int = 32, *, positions: Tensor | None = None) -> Tensor:
        """What this encoding adds to the scaled attention logits, per head and (query, key) pair.

        Queries and keys are ``c + e`` split into heads, with identity projections: ``e =
        embed(0, positions)`` is the absolute part (zero without an ``embed`` hook) and ``c`` a fixed
        content, ``ones(head_dim)`` per head (the convention of RoFormer's long-term-decay figure, Su et
        al. 2021, arXiv:2104.09864, Sec. 3.4.3). Then :meth:`rotate` acts, the logits are
        ``q . k / sqrt(head_dim) + bias``, and the pattern is those logits minus the content alone,
        ``c . c / sqrt(head_dim)``: the bias itself for a bias encoder, the rotary change of ``q . k``
        for RoPE, zero for NoPE. An encoding with only an ``embed`` hook is drawn with ``c = 0``, so its
        pattern is the position-position term ``e_i . e_j / sqrt(head_dim)`` (the similarity of
        position vectors that APE studies plot) rather than the content-position cross terms.
        No causal mask is applied (entries with the key after the query are kept); an entry is
        ``-inf`` where the encoding's own bias masks a pair (e.g. non-edges of a graph attention).
        Learnable encodings are drawn with their current parameters, in eval mode (the module's
        modes are restored after).
        ``pe_toolkit.plotting`` draws it; an encoder whose hooks do not fit this recipe overrides the
        method and documents what its axes are.

        Args:
            length: sequence length ``L``.
            positions: positions of one sequence of ``L`` tokens in this encoding's format; default
                :meth:`example_positions` ``(length)``.

        Returns:
            ``(H, L, L)``, float32 (float64 for a float64 encoding); ``[h, i, j]`` for query ``i``, key ``j``.
        """
        check_int("length", length)
        if positions is None:
            positions = self.example_positions(length)
        elif not isinstance(positions, Tensor):
            raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
        elif positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must hold integer or float values, got dtype {positions.dtype}")
        elif positions.is_floating_point():
            require_finite("positions", positions)
        require_all(self.position_checks(positions, "positions"))
        modes = [(module, module.training) for module in self.modules()]
        self.eval()  # no dropout, and normalisation layers read (not update) their running statistics
        try:
            return self._pattern(length, positions)
        finally:
            for module, training in modes:
                module.training = training

    def _pattern(self, length: int, positions: Tensor) -> Tensor:
        parameter = next(self.parameters(), None)
        dtype = torch.float64 if parameter is not None and parameter.dtype == torch.float64 else torch.float32
        device = parameter.device if parameter is not None else positions.device
        positions = positions.to(device)
        heads, head_dim = self.num_heads, self.head_dim
        x = torch.zeros(1, length, self.dim, dtype=dtype, device=device)
        e = self.embed(x, positions).to(dtype).reshape(1, length, heads, head_dim).transpose(1, 2)
        embed_only = type(self).rotate is PositionalEncoding.rotate and type(self).bias is PositionalEncoding.bias
        content = torch.full((1, heads, length, head_dim), 0.0 if embed_only else 1.0, dtype=dtype, device=device)
        q, k = self.rotate(content + e, content + e, positions, positions)
        logits = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
        bias = self.bias(q, k, positions, positions)
        if bias is not None:
            logits = logits + bias.to(dtype)
        content_alone = 0.0 if embed_only else math.sqrt(head_dim)
        return (logits - content_alone).expand(1, heads, length, length)[0]

    def constrain_(self) -> None:
        """Project parameters back onto their allowed set; called after every optimizer step by the
        training modules (:func:`constrain_encodings`). A no-op unless overridden."""

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, causal={self.causal}"


register_encoder(
    "nope",
    relative=True,
    reference="Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization "
    "in Transformers, arXiv:2305.19466",
)(PositionalEncoding)


class PositionBiasEncoding(PositionalEncoding):
    """Base for encoders whose bias depends only on positions and parameters (ALiBi, T5, ...).

    Subclasses implement :meth:`score` (and may override :meth:`position_bias` for speed).
    :meth:`bias` keeps nothing between calls: it is a function of the positions and the current
    parameters. Sharing one bias between the layers of a forward is the caller's business: the
    ``Transformer`` (and a bare attention layer) builds it once at the start of each forward and passes
    it down (:class:`~pe_toolkit.nn.position_state.PositionState`), so replaced weights
    (``load_state_dict(assign=True)``, ``param.data = ...``, a step under ``inference_mode``) act on
    the very next forward.
    """

    shift_invariant = False
    """True when :meth:`score` depends on the positions only through ``k_pos - q_pos`` (then the dense
    bias is evaluated once per distinct distance and gathered)."""

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """The bias of one (head, query position, key position) triple: the encoder's one definition.

        Elementwise over its arguments, which broadcast together: ``head`` a long tensor of head
        indices, ``q_pos`` / ``k_pos`` position values as the caller gave them (integer or float),
        ``num_keys`` the number of keys of the attention call. Returns ``dtype`` (float32 or
        float64) values of the broadcast shape. Built from elementwise operations and lookups only,
        so that :meth:`position_bias` (dense), :meth:`bias_function` (FlexAttention's ``score_mod``,
        the tiles of a memory-bounded backend) all derive from it.
        """
        raise NotImplementedError

    def position_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, *,
                      span: tuple[int, int] | None = None) -> Tensor:
        """The dense bias ``(B or 1, H, Lq, Lk)`` in ``dtype`` (float32 or float64), from :meth:`score`.

        ``q_pos`` / ``k_pos`` arrive as given by the caller (integer or float), ``(L,)`` or
        ``(B, L)``. A :attr:`shift_invariant` encoder with integer positions evaluates the score
        once per distinct distance (``Lq + Lk - 1`` of them for contiguous positions) and gathers,
        which equals the pairwise evaluation exactly; otherwise every pair is evaluated.
        Subclasses may override it for speed; ``tests/test_conformance.py`` checks that the result
        equals :meth:`score` on every pair. ``span``: see :func:`distance_range`.
        """
        return score_bias(self.score, self.num_heads, q_pos, k_pos, dtype, shift_invariant=self.shift_invariant,
                          span=span)

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction:
        """:meth:`score` at the positions ``q_pos[b, i]`` and ``k_pos[b, j]`` (:func:`position_lookup`).

        A :attr:`shift_invariant` encoder with integer positions evaluates the score once per distinct
        distance (``(H, hi - lo + 1)``, as :meth:`position_bias` does) and the function looks it up:
        the same values, without evaluating the formula on every pair inside the kernel (Sandwich's
        sum of cosines made FlexAttention 12x slower than dense at L = 8,192 without it).
        """
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        num_keys = k_pos.shape[-1]
        query, key = position_lookup(q_pos), position_lookup(k_pos)
        span = distance_range(q_pos, k_pos) if self.shift_invariant else None
        if span is not None:
            lo, hi = span
            heads = torch.arange(self.num_heads, device=q_pos.device)
            distances = torch.arange(lo, hi + 1, device=q_pos.device)
            table = self.score(heads[:, None], torch.zeros_like(distances), distances, dtype, num_keys)  # (H, n)

            def tabulated(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
                return table[h, key(b, j) - query(b, i) - lo]

            tabulated.relative_table = functools.partial(relative_table, table, q_pos, k_pos, lo)
            return tabulated

        def function(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            return self.score(h, query(b, i), key(b, j), dtype, num_keys)

        return function

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *,
             span: tuple[int, int] | None = None) -> Tensor:
        """:meth:`position_bias` in float32 (float64 for float64 ``q``); nothing is kept between calls.

        ``span``: ``(lo, hi)`` with ``lo <= k_pos - q_pos <= hi`` for every pair, when the caller knows it
        without reading the tensors (:func:`distance_range`); it saves a host synchronisation.
        """
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return position_bias_with_span(self, q_pos, k_pos, dtype, span)


def position_bias_with_span(encoding: PositionBiasEncoding, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype,
                            span: tuple[int, int] | None) -> Tensor:
    """``encoding.position_bias`` with ``span`` passed where its override accepts it (older subclasses may not)."""
    if span is not None and "span" in inspect.signature(encoding.position_bias).parameters:
        return encoding.position_bias(q_pos, k_pos, dtype, span=span)
    return encoding.position_bias(q_pos, k_pos, dtype)


def constrain_encodings(module: nn.Module) -> None:
    """Call :meth:`PositionalEncoding.constrain_` on every encoding inside ``module`` (after a step)."""
    for sub in module.modules():
        if isinstance(sub, PositionalEncoding):
            sub.constrain_()
