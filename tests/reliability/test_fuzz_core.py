"""Property-based (hypothesis) tests of the core's parsers and constructors.

The contract (docs/reliability.md): for any input, the outcome is a correct result or a clear
``ValueError`` / ``TypeError`` (``FileNotFoundError`` for a missing path) — never another
exception, a hang, or a silent wrong answer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

import pe_toolkit as pet
from pe_toolkit.data.text_corpus import load_text_files
from pe_toolkit.domains.graphs.datasets import load_edge_list

FUZZ = fuzz(150)
SEQUENCE_ENCODERS = pet.list_encoders(domain="sequence")

# Values of every kind an option may be given: valid, out of range, wrong type, non-finite.
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10_000), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.lists(st.integers(-3, 3), max_size=3),
)


def _option_names(name: str) -> list[str]:
    import inspect

    signature = inspect.signature(pet.encoder_info(name).cls.__init__)
    return [p for p in signature.parameters if p not in {"self", "dim", "num_heads"}]


@FUZZ
@given(
    name=st.sampled_from(SEQUENCE_ENCODERS),
    dim=st.one_of(st.integers(-4, 70), st.floats(allow_nan=True), st.text(max_size=2)),
    num_heads=st.one_of(st.integers(-2, 9), st.none()),
    data=st.data(),
)
def test_encoder_constructor_fuzz(name, dim, num_heads, data):
    """Any options: a working encoder or ValueError/TypeError naming the problem."""
    options = {}
    for option in _option_names(name):
        if data.draw(st.booleans(), label=f"give {option}"):
            options[option] = data.draw(ANY_VALUE, label=option)
    try:
        encoder = pet.get_encoder(name, dim, num_heads, **options)
    except (ValueError, TypeError) as error:
        assert str(error), "an error must say what is wrong"
        return
    # constructed: it must then work on a small valid input
    head_dim = encoder.dim // encoder.num_heads
    q = torch.randn(1, encoder.num_heads, 4, head_dim)
    positions = torch.arange(4)
    x = encoder.embed(torch.randn(1, 4, encoder.dim), positions)
    assert torch.isfinite(x).all()
    q_rot, k_rot = encoder.rotate(q, q, positions, positions)
    assert torch.isfinite(q_rot).all() and torch.isfinite(k_rot).all()


@FUZZ
@given(content=st.binary(max_size=300))
def test_text_file_loader_fuzz(content):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "user.txt"
        path.write_bytes(content)
        try:
            corpus = load_text_files(path)
        except ValueError as error:
            assert "not UTF-8" in str(error) and "user.txt" in str(error)
            try:
                content.decode("utf-8")
            except UnicodeDecodeError:
                return
            raise AssertionError(f"valid UTF-8 rejected: {error}") from None
        # accepted: valid UTF-8, exactly the file's bytes, as one document
        content.decode("utf-8")
        assert [d.data for d in corpus.documents] == [content]


EDGE_LINE = st.one_of(
    st.tuples(st.integers(-2, 30), st.integers(-2, 30)).map(lambda t: f"{t[0]} {t[1]}"),
    st.text(alphabet="0123456789 -#\tabx.\r", max_size=12),
)


@FUZZ
@given(lines=st.lists(EDGE_LINE, max_size=12), num_nodes=st.one_of(st.none(), st.integers(-1, 40)))
def test_edge_list_loader_fuzz(lines, num_nodes):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "graph.txt"
        path.write_text("\n".join(lines))
        try:
            data = load_edge_list(path, num_nodes=num_nodes)
        except (ValueError, TypeError) as error:
            # a bad line names the file; a bad num_nodes argument names the argument
            assert ("load_edge_list" in str(error) and "graph.txt" in str(error)) or "num_nodes" in str(error), error
            return
    # accepted: every parsed edge is in the result, in both directions, and ids are in range
    edges = set()
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if fields:
            u, v = int(fields[0]), int(fields[1])
            edges |= {(u, v), (v, u)}
    assert set(map(tuple, data.edge_index.t().tolist())) == edges
    assert data.num_nodes == (num_nodes if num_nodes is not None else (max(max(e) for e in edges) + 1 if edges else 0))
