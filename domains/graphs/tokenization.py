"""Graph Mamba's tokenization: random-walk neighbourhood tokens per node, and degree-based node ordering.

Behrouz & Hashemi 2024, "Graph Mamba: Towards Learning on Graphs with State Space Models", KDD 2024,
arXiv:2402.08678, Sec. 4 (steps 1 "neighborhood tokenization" and 2 "token ordering").

For every node ``v``, every walk length ``l = 1..m`` (``walk_length``) and every repetition ``r = 1..s``
(``repeats``), ``M`` (``num_walks``) uniform random walks of ``l`` steps start at ``v``; the token
``T_l^r(v)`` is the set of nodes they visit (``v`` included). The sequence of a node is
``[T_m^1 .. T_m^s, T_{m-1}^1 .. T_{m-1}^s, .., T_1^1 .. T_1^s, T_0 = {v}]``: the largest neighbourhood first
and the node itself last, ``m * s + 1`` tokens. The paper shuffles the tokens of equal walk length; here
the ``s`` repetitions are independent draws, so their order is already exchangeable and no shuffle is needed.
A walk at a node without neighbours stays there.

Randomness: with ``generator=None`` the global RNG is used (fresh tokens in every training step); pass a
seeded ``torch.Generator`` for reproducible tokens (the model does so in ``eval()``). Walks are drawn per
node id, so relabelling the nodes changes which walk a node gets: the tokens are permutation equivariant
in distribution, not sample by sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_int

__all__ = ["WalkTokens", "degree_order", "random_walk_tokens", "uniform_random_walks"]


def _check_graph(owner: str, edge_index: Tensor, num_nodes: int) -> None:
    check_int(f"{owner}: num_nodes", num_nodes, minimum=0)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{owner}: edge_index must be a (2, E) tensor, got {getattr(edge_index, 'shape', None)}")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
        raise TypeError(f"{owner}: edge_index must be an integer tensor, got {edge_index.dtype}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"{owner}: edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}], "
                         f"allowed [0, {num_nodes - 1}]")


def uniform_random_walks(edge_index: Tensor, start: Tensor, steps: int, num_nodes: int, *,
                         generator: torch.Generator | None = None) -> Tensor:
    """``(W, steps + 1)`` node ids of uniform random walks from ``start`` ``(W,)`` along ``edge_index`` (i -> j).

    One vectorised draw per step for all walkers (the loop runs over the ``steps`` walk steps, not over nodes
    or walkers); a neighbour is chosen uniformly among the out-edges of the CSR row (multi-edges count
    with their multiplicity). A walker at a node without out-edges stays there.
    """
    owner = "uniform_random_walks"
    _check_graph(owner, edge_index, num_nodes)
    check_int(f"{owner}: steps", steps, minimum=0)
    device = edge_index.device
    row, col = edge_index.long()
    order = torch.argsort(row * max(num_nodes, 1) + col)
    col = col[order]
    deg = torch.bincount(row, minlength=num_nodes)
    ptr = torch.cumsum(deg, 0) - deg  # first out-edge of each node
    pos = start.long().to(device)
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= num_nodes):
        raise ValueError(f"{owner}: start holds node ids in [{int(pos.min())}, {int(pos.max())}], "
                         f"allowed [0, {num_nodes - 1}]")
    walk = [pos]
    for _ in range(steps):
        u = torch.rand(pos.numel(), generator=generator, device="cpu" if generator is not None else device)
        d = deg[pos]
        if col.numel():  # offset floor(u * deg) < deg; nodes without edges read any index and stay
            pick = (ptr[pos] + (u.to(device) * d).long().clamp(max=(d - 1).clamp(min=0))).clamp(max=col.numel() - 1)
            pos = torch.where(d > 0, col[pick], pos)
        walk.append(pos)
    return torch.stack(walk, dim=1)


@dataclass
class WalkTokens:
    """Tokens as (token, node) memberships.

    Attributes:
        token: ``(K,)`` token id ``v * tokens_per_node + j`` (``j`` = position in the node's sequence,
            ``0`` = first = largest walk length).
        node: ``(K,)`` node in that token (each (token, node) pair once).
        count: ``(num_nodes * tokens_per_node,)`` number of nodes per token (>= 1).
        tokens_per_node: ``m * s`` (the node token ``T_0`` is not stored).
    """

    token: Tensor
    node: Tensor
    count: Tensor
    tokens_per_node: int

    def pool(self, h: Tensor) -> Tensor:
        """``(N, m*s, C)`` mean of ``h`` ``(N, C)`` over the nodes of every token (a DeepSets readout)."""
        n, c = h.shape
        total = torch.zeros(n * self.tokens_per_node, c, dtype=h.dtype, device=h.device)
        total = total.index_add(0, self.token, h[self.node])
        return (total / self.count.unsqueeze(-1).to(h.dtype)).view(n, self.tokens_per_node, c)


def random_walk_tokens(edge_index: Tensor, num_nodes: int, *, walk_length: int, num_walks: int, repeats: int = 1,
                       generator: torch.Generator | None = None) -> WalkTokens:
    """Graph Mamba's random-walk neighbourhood tokens of every node (see the module docstring).

    Args:
        edge_index: ``(2, E)`` edges (both directions for an undirected graph).
        num_nodes: ``N``.
        walk_length: ``m`` (>= 1): tokens for walk lengths ``1..m``.
        num_walks: ``M`` (>= 1) walks per token.
        repeats: ``s`` (>= 1) tokens per walk length.
        generator: seeded generator, or None for the global RNG.

    Returns:
        :class:`WalkTokens` with ``tokens_per_node = m * s``.
    """
    owner = "random_walk_tokens"
    _check_graph(owner, edge_index, num_nodes)
    m = check_int(f"{owner}: walk_length", walk_length)
    walks_per_token = check_int(f"{owner}: num_walks", num_walks)
    s = check_int(f"{owner}: repeats", repeats)
    per_node = m * s
    device = edge_index.device
    # walker w: node v, sequence slot j (0..m*s-1), walk i (0..M-1); slot j has length l = m - j // s
    slots = num_nodes * per_node
    start = torch.arange(num_nodes, device=device).repeat_interleave(per_node * walks_per_token)
    walks = uniform_random_walks(edge_index, start, m, num_nodes, generator=generator)  # (W, m + 1)
    token = torch.arange(slots, device=device).repeat_interleave(walks_per_token)  # (W,)
    length = m - (token % per_node) // s  # (W,) in 1..m
    keep = torch.arange(m + 1, device=device) <= length[:, None]  # prefix of l steps: l + 1 nodes
    pairs = token[:, None].expand_as(walks)[keep] * max(num_nodes, 1) + walks[keep]
    pairs = torch.unique(pairs)  # sorted, each (token, node) once
    token, node = pairs // max(num_nodes, 1), pairs % max(num_nodes, 1)
    count = torch.bincount(token, minlength=slots)
    return WalkTokens(token=token, node=node, count=count, tokens_per_node=per_node)


def degree_order(edge_index: Tensor, batch: Tensor, *, generator: torch.Generator | None = None,
                 random_ties: bool = False) -> Tensor:
    """``(N,)`` permutation that sorts the nodes by graph (``batch``), then by degree ascending, then ties.

    Graph Mamba orders the node sequence by degree (Behrouz & Hashemi 2024), so the highest-degree nodes come
    last and a forward scan has seen the rest of the graph when it reaches them. Ties: by node id
    (``random_ties=False``, deterministic), or in random order (``random_ties=True``; ``generator`` or the
    global RNG). ``batch[perm]`` is sorted, as ``to_dense_batch`` requires.
    """
    n = batch.numel()
    _check_graph("degree_order", edge_index, n)
    deg = torch.bincount(edge_index[1], minlength=n)
    if random_ties:
        perm = torch.randperm(n, generator=generator, device="cpu" if generator is not None else batch.device)
        perm = perm.to(batch.device)
    else:
        perm = torch.arange(n, device=batch.device)
    perm = perm[torch.argsort(deg[perm], stable=True)]
    return perm[torch.argsort(batch[perm], stable=True)]
