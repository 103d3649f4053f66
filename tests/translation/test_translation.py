"""Toy corpus, loader, reorderer, the xl_pe encoder, the translation model and a tiny Lightning run."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
import pe_toolkit.domains.translation  # noqa: F401  (registers xl_pe)
from pe_toolkit.domains.translation import (
    BTGReorderer,
    TranslationModel,
    Vocabulary,
    alignment_permutation,
    btg_tree_from_alignment,
    generate_corpus,
    load_parallel_corpus,
    reorder,
)
from pe_toolkit.domains.translation.encoders import CrossLingualPositionEncoding
from pe_toolkit.encoders.absolute import sinusoidal_table

# ----------------------------------------------------------------------------------------- data


def test_corpus_is_seeded_and_reordering_recovers_target_order():
    a, b = generate_corpus(50, seed=3), generate_corpus(50, seed=3)
    assert a == b and a != generate_corpus(50, seed=4)
    for pair in a:
        tree = btg_tree_from_alignment(pair.alignment, len(pair.source), strict=True)  # always a BTG tree
        # the reordered source, translated word by word, is the target without its inserted markers
        translated = [w.upper() for w in reorder(list(pair.source), tree) if w != "a"]
        assert translated == [w for w in pair.target if w not in ("GA", "O")]


def test_corpus_example_svo_to_sov():
    pair = next(p for p in generate_corpus(200, seed=0, max_depth=0) if len(p.source) == 5 and "a" not in p.source)
    # Det N Vt Det N -> Det' N' GA Det' N' O Vt'
    assert pair.target[2] == "GA" and pair.target[5] == "O" and pair.target[6] == pair.source[2].upper()
    assert alignment_permutation(pair.alignment, 5) == [0, 1, 4, 2, 3]


def test_corpus_bad_arguments():
    with pytest.raises(ValueError, match="num_pairs must be >= 1, got 0"):
        generate_corpus(0, seed=0)
    with pytest.raises(ValueError, match="relative_prob must be in"):
        generate_corpus(1, seed=0, relative_prob=1.5)
    with pytest.raises(TypeError, match="max_depth must be an int"):
        generate_corpus(1, seed=0, max_depth=1.0)


def test_load_parallel_corpus(tmp_path):
    (tmp_path / "src").write_text("he ate rice\nhello\n")
    (tmp_path / "tgt").write_text("HE RICE ATE\nHELLO\n")
    (tmp_path / "al").write_text("0-0 1-2 2-1\n0-0\n")
    pairs = load_parallel_corpus(tmp_path / "src", tmp_path / "tgt", tmp_path / "al")
    assert pairs[0].source == ("he", "ate", "rice") and pairs[0].alignment == ((0, 0), (1, 2), (2, 1))
    assert load_parallel_corpus(tmp_path / "src", tmp_path / "tgt")[1].alignment == ()


@pytest.mark.parametrize(
    ("src", "tgt", "al", "match"),
    [
        ("a b\nc\n", "A B\n", None, "different numbers of lines"),
        ("a b\n\n", "A B\nC\n", None, "empty source sentence at line 2"),
        ("a b\n", "A B\n", "0-0 5-1\n", "line 1: btg: alignment source index 5"),
        ("a b\n", "A B\n", "0-0 x\n", "line 1: btg: alignment field 'x'"),
    ],
)
def test_load_parallel_corpus_bad_files(tmp_path, src, tgt, al, match):
    (tmp_path / "s").write_text(src)
    (tmp_path / "t").write_text(tgt)
    if al is not None:
        (tmp_path / "a").write_text(al)
    with pytest.raises(ValueError, match=match):
        load_parallel_corpus(tmp_path / "s", tmp_path / "t", tmp_path / "a" if al is not None else None)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_parallel_corpus(tmp_path / "nope", tmp_path / "nope2")


def test_vocabulary_round_trip():
    vocab = Vocabulary(["b", "a", "a"])
    assert vocab.itos[4:] == ["a", "b"] and vocab.encode(["a", "zz"]) == [4, vocab.unk_id]
    assert vocab.decode([vocab.bos_id, 4, 5, vocab.eos_id, 4]) == ["a", "b"]


# ------------------------------------------------------------------------------------ reorderer


def test_reorderer_learns_inversions_from_alignments():
    pairs = generate_corpus(300, seed=0, max_depth=0)
    vocab = Vocabulary(w for p in pairs for w in p.source)
    sentences = [vocab.encode(p.source) for p in pairs]
    perms = [alignment_permutation(p.alignment, len(p.source)) for p in pairs]
    reorderer = BTGReorderer(len(vocab))
    history = reorderer.fit(sentences, perms, epochs=2)["train_accuracy"]
    assert history[-1] >= history[0]
    held_out = generate_corpus(100, seed=1, max_depth=0)
    correct = sum(reorderer.positions(vocab.encode(p.source)) == alignment_permutation(p.alignment, len(p.source))
                  for p in held_out)
    assert correct >= 95  # single clauses: the verb-object inversion is a boundary-word decision


def test_position_accuracy_by_hand_and_its_errors():
    from pe_toolkit.domains.translation import position_accuracy

    # sentence 1 exact; sentence 2: tokens 0 and 1 swapped, token 2 right -> 1 sentence of 2, 3 tokens of 5
    assert position_accuracy([[0, 1], [1, 0, 2]], [[0, 1], [0, 1, 2]]) == {"sentence": 0.5, "token": 0.6}
    assert position_accuracy([[2, 1, 0]], [[2, 1, 0]]) == {"sentence": 1.0, "token": 1.0}
    with pytest.raises(ValueError, match="1 predicted and 2 reference sentences"):
        position_accuracy([[0]], [[0], [0]])
    with pytest.raises(ValueError, match="at least one"):
        position_accuracy([], [])
    with pytest.raises(ValueError, match="sentence 0 has 2 predicted and 3 reference positions"):
        position_accuracy([[0, 1]], [[0, 1, 2]])


def test_reorderer_bad_input():
    reorderer = BTGReorderer(5)
    with pytest.raises(ValueError, match="non-empty"):
        reorderer.parse([])
    with pytest.raises(ValueError, match=r"word ids must lie in \[0, 5\)"):
        reorderer.parse([0, 7])
    with pytest.raises(ValueError, match="2 sentences but 1 permutations"):
        reorderer.fit([[0], [1]], [[0]])
    with pytest.raises(ValueError, match="sentence 0 has 2 tokens but its permutation has 3"):
        reorderer.fit([[0, 1]], [[0, 1, 2]])
    with pytest.raises(ValueError, match="not binarizable"):
        reorderer.fit([[0, 1, 2, 3]], [[1, 3, 0, 2]])
    with pytest.raises(ValueError, match="vocab_size must be an int >= 1"):
        BTGReorderer(0)


# ------------------------------------------------------------------------------------ encoder


def test_xl_pe_is_registered():
    info = pet.encoder_info("xl_pe")
    assert info.domain == "translation" and "2004.13310" in info.reference and not info.relative
    assert set(info.hooks) == {"embed", "rotate"}


def test_input_strategy_adds_both_sinusoids():
    enc = pet.get_encoder("xl_pe", 8, 2, strategy="input").double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    xl = torch.tensor([[0, 2, 1], [2, 1, 0]])
    positions = torch.stack((torch.arange(3).expand(2, 3), xl), dim=-1)
    expected = x + sinusoidal_table(torch.arange(3), 8, dtype=torch.float64) + sinusoidal_table(xl, 8,
                                                                                                 dtype=torch.float64)
    torch.testing.assert_close(enc.embed(x, positions), expected)
    # the first sinusoid pair by hand: position 2 -> sin(2), cos(2) with w_0 = 1
    assert math.isclose(float(sinusoidal_table(torch.tensor(2), 8, dtype=torch.float64)[0]), math.sin(2.0))


def test_identity_reordering_is_pe_twice_and_head_strategy_touches_only_xl_heads():
    enc = CrossLingualPositionEncoding(8, 4, strategy="head", xl_heads=1).double()
    torch.nn.init.normal_(enc.q_proj.weight)
    torch.nn.init.normal_(enc.k_proj.weight)
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    positions = torch.stack((torch.arange(5), torch.tensor([4, 3, 2, 1, 0])), dim=-1)
    torch.testing.assert_close(enc.embed(x, positions), x + sinusoidal_table(torch.arange(5), 8, dtype=torch.float64))
    q, k = torch.randn(1, 4, 5, 2, dtype=torch.float64), torch.randn(1, 4, 5, 2, dtype=torch.float64)
    q2, k2 = enc.rotate(q, k, positions, positions)
    torch.testing.assert_close(q2[:, :3], q[:, :3])
    torch.testing.assert_close(k2[:, :3], k[:, :3])
    table = sinusoidal_table(positions[:, 1], 8, dtype=torch.float64)
    torch.testing.assert_close(q2[0, 3], q[0, 3] + table @ enc.q_proj.weight.T)
    torch.testing.assert_close(k2[0, 3], k[0, 3] + table @ enc.k_proj.weight.T)


def test_head_strategy_gradcheck():
    enc = CrossLingualPositionEncoding(4, 2, strategy="head").double()
    attn = pet.MultiHeadAttention(4, 2, encoding=enc).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    positions = torch.stack((torch.arange(3), torch.tensor([2, 0, 1])), dim=-1)
    weight = enc.q_proj.weight.detach().clone().requires_grad_()

    def out(w):
        return torch.func.functional_call(attn, {"encoding.q_proj.weight": w}, (x,), {"q_pos": positions})

    assert torch.autograd.gradcheck(out, (weight,))


def test_cross_lingual_position_changes_the_encoder_output():
    model = TranslationModel(10, 10, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="xl_pe")
    source = torch.randint(4, 10, (1, 4))
    mask = torch.ones(1, 4, dtype=torch.bool)
    a = model.encode(source, mask, torch.tensor([[0, 1, 2, 3]]))
    b = model.encode(source, mask, torch.tensor([[0, 3, 2, 1]]))
    assert torch.allclose(a[:, 0], a[:, 0]) and not torch.allclose(a, b)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"strategy": "both"}, ValueError, "strategy must be one of"),
        ({"strategy": "head", "xl_heads": 5}, ValueError, r"xl_heads must be <= num_heads \(4\), got 5"),
        ({"xl_heads": 0}, ValueError, "xl_heads must be >= 1"),
    ],
)
def test_xl_pe_bad_options(options, error, match):
    with pytest.raises(error, match=match):
        pet.get_encoder("xl_pe", 8, 4, **options)


def test_xl_pe_bad_positions():
    enc = pet.get_encoder("xl_pe", 8, 2)
    with pytest.raises(ValueError, match=r"shape \(L, 2\) or \(B, L, 2\).*got \(3,\)"):
        enc.embed(torch.randn(1, 3, 8), torch.arange(3))


# ------------------------------------------------------------------------------------ model


def test_model_bad_input():
    model = TranslationModel(10, 12, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="xl_pe")
    source = torch.randint(4, 10, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"xl_positions has shape \(3, 5\), expected \(2, 5\)"):
        model.encode(source, mask, torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="pass xl_positions"):
        model.encode(source, mask)
    with pytest.raises(ValueError, match="target_in has batch size 3 but source has 2"):
        model(source, mask, torch.zeros(3, 4, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="source_mask must be a bool tensor"):
        model.encode(source, mask.long(), torch.zeros(2, 5, dtype=torch.long))
    assert model(source, mask, torch.zeros(2, 4, dtype=torch.long),
                 torch.arange(5).expand(2, 5)).shape == (2, 4, 12)


def test_padding_does_not_change_a_sentence():
    model = TranslationModel(10, 12, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="xl_pe",
                             encoding_options={"strategy": "head"}).eval()
    source = torch.tensor([[5, 6, 7, 0, 0]])
    mask = torch.tensor([[True, True, True, False, False]])
    xl = torch.tensor([[0, 2, 1, 0, 0]])
    padded = model.encode(source, mask, xl)[:, :3]
    alone = model.encode(source[:, :3], mask[:, :3], xl[:, :3])
    torch.testing.assert_close(padded, alone)


def test_tiny_lightning_run_reports_bleu():
    import lightning as L

    from pe_toolkit.domains.translation.lightning_module import (
        TranslationDataModule,
        TranslationDataset,
        TranslationModule,
        corpus_bleu,
        oracle_positions,
    )

    pairs = generate_corpus(32, seed=0, max_depth=0)
    sv, tv = Vocabulary(w for p in pairs for w in p.source), Vocabulary(w for p in pairs for w in p.target)
    data = TranslationDataset(pairs, sv, tv, oracle_positions(pairs))
    module = TranslationModule(tv.itos, len(sv), {"dim": 16, "num_heads": 2, "encoder_layers": 1,
                                                  "decoder_layers": 1, "encoding": "xl_pe"}, max_steps=3)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, TranslationDataModule(data, data, batch_size=16))
    assert 0.0 <= module.results["bleu"] <= 100.0 and len(module.hypotheses) == 32
    assert corpus_bleu([["A", "B", "C", "D"]], [["A", "B", "C", "D"]]) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        corpus_bleu([["A"]], [["A"], ["B"]])
    with pytest.raises(ValueError, match=r"xl_positions\[0\] must be a permutation of 0..6"):
        TranslationDataset(pairs[:1], sv, tv, [[0, 0, 1, 2, 3]])


def test_empty_sentences_are_rejected():
    from pe_toolkit.domains.translation import SentencePair

    with pytest.raises(ValueError, match="source must not be empty"):
        SentencePair((), ("A",), ())
    with pytest.raises(ValueError, match="target must not be empty"):
        SentencePair(("a",), (), ())
    with pytest.raises(ValueError, match=r"alignment source index 1 is outside \[0, 1\)"):
        SentencePair(("a",), ("A",), ((1, 0),))


# ------------------------------------------------------------------ cross-lingual positions, embedding scale
@pytest.mark.parametrize(
    ("xl", "match"),
    [
        (torch.tensor([[0, 1, 2, 3, 999], [0, 1, 2, 3, 4]]), r"xl_positions\[0, 4\] = 999 is outside \[0, 5\)"),
        (torch.tensor([[0, 1, 2, 3, 4], [0, -1, 2, 3, 4]]), r"xl_positions\[1, 1\] = -1 is outside \[0, 5\)"),
        (torch.tensor([[0.0, 1.5, 2.0, 3.0, 4.0]] * 2), "xl_positions must be an integer tensor.*float32"),
        (torch.tensor([[0, 1, 1, 3, 4]] * 2), "xl_positions row 0 gives position 1 to 2 tokens"),
        (torch.ones(2, 5, dtype=torch.bool), "xl_positions must be an integer tensor.*bool"),
    ],
)
def test_model_rejects_bad_cross_lingual_positions(xl, match):
    model = TranslationModel(10, 12, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="xl_pe")
    source = torch.randint(4, 10, (2, 5))
    with pytest.raises(ValueError, match=match):
        model.encode(source, torch.ones(2, 5, dtype=torch.bool), xl)


def test_model_checks_positions_over_the_real_tokens_only():
    model = TranslationModel(10, 12, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="xl_pe")
    source = torch.randint(4, 10, (2, 5))
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    ok = torch.tensor([[4, 3, 2, 1, 0], [2, 0, 1, 0, 0]])  # padding entries are ignored
    assert model.encode(source, mask, ok).shape == (2, 5, 16)
    with pytest.raises(ValueError, match=r"xl_positions\[1, 0\] = 3 is outside \[0, 3\)"):
        model.encode(source, mask, torch.tensor([[4, 3, 2, 1, 0], [3, 0, 1, 0, 0]]))


def test_xl_pe_rejects_bad_cross_lingual_positions():
    enc = pet.get_encoder("xl_pe", 8, 2)
    x = torch.randn(1, 3, 8)
    plain = torch.arange(3)
    for xl, match in ((torch.tensor([0, 1, 999]), r"positions\[\.\.\., 1\].*\[0, 3\) for 3 tokens, got 999"),
                      (torch.tensor([0, -1, 2]), r"\[0, 3\) for 3 tokens, got -1"),
                      (torch.tensor([0.0, 1.5, 2.0]), r"positions\[\.\.\., 1\].*must be integers, got 1.5")):
        with pytest.raises(ValueError, match=match):
            enc.embed(x, torch.stack((plain.to(xl.dtype), xl), dim=-1))
    head = pet.get_encoder("xl_pe", 8, 2, strategy="head")
    bad = torch.stack((plain, torch.tensor([0, 1, 3])), dim=-1)
    # the per-layer rotate reads nothing from the device: the attention's entry checks the values, once
    layer = pet.MultiHeadAttention(8, 2, encoding=head)
    with pytest.raises(ValueError, match=r"q_pos\[\.\.\., 1\].*\[0, 3\) for 3 tokens, got 3"):
        layer(x, q_pos=bad)
    with pytest.raises(ValueError, match=r"k_pos\[\.\.\., 1\].*\[0, 3\) for 3 tokens, got 3"):
        layer(x, q_pos=torch.stack((plain, plain), dim=-1), k_pos=bad)
    # integral floats are positions too (interpolated index positions may be float)
    out = enc.embed(x, torch.stack((plain, torch.tensor([2, 0, 1])), dim=-1).double())
    assert out.shape == x.shape


@torch.no_grad()
def test_token_embeddings_are_on_the_scale_of_the_positions():
    torch.manual_seed(0)
    dim = 64
    model = TranslationModel(200, 200, dim=dim, num_heads=4, encoder_layers=1, decoder_layers=1, encoding="xl_pe")
    tokens = torch.arange(4, 200).unsqueeze(0)
    rms = model.encoder.embed_tokens(tokens).pow(2).mean().sqrt()
    assert 0.9 < float(rms) < 1.1  # N(0, 1/dim) times sqrt(dim): unit coordinates
    pe = model.encoder.encodings[0].embed(torch.zeros(1, 10, dim), torch.stack([torch.arange(10)] * 2, -1))
    ratio = float(pe.pow(2).mean().sqrt() / rms)
    assert ratio < 1.5  # PE(t) + PE(t_xl) has RMS ~1.4 per coordinate here
    old = TranslationModel(200, 200, dim=dim, num_heads=4, encoder_layers=1, decoder_layers=1, encoding="xl_pe",
                           scale_embeddings=False)
    unscaled = old.encoder.embed_tokens(tokens).pow(2).mean().sqrt()
    assert 0.018 < float(unscaled) < 0.022 and float(pe.pow(2).mean().sqrt() / unscaled) > 60  # the old confound
    assert float(model.decoder.embed_tokens(tokens).pow(2).mean().sqrt()) > 0.9
    with pytest.raises(TypeError, match="scale_embeddings must be a bool"):
        TranslationModel(10, 10, dim=16, num_heads=2, scale_embeddings=1)
