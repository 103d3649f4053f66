"""`pe-toolkit info` prints plain text: no reST markup from the docstrings reaches the terminal."""

import re

import pe_toolkit as pet
from pe_toolkit.cli import describe, terminal_text


def test_terminal_text_drops_rest_markup():
    assert terminal_text("by ``position * theta_k`` so") == "by position * theta_k so"
    assert terminal_text('one of ``None``, ``"linear"``') == 'one of None, "linear"'
    assert terminal_text("see :class:`~pe_toolkit.nn.Transformer` and :func:`pe_toolkit.get_encoder`") == (
        "see Transformer and pe_toolkit.get_encoder")
    assert terminal_text("a `single` quote stays") == "a `single` quote stays"


def test_info_of_every_sequence_encoder_has_no_markup():
    for name in pet.list_encoders(domain="sequence"):
        text = describe(name)
        assert "``" not in text and not re.search(r":\w+:`", text), (name, text)
    assert "RoPE: rotate query/key dimension pairs by position * theta_k" in describe("rope")
