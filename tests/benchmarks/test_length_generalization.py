"""The length-generalization benchmark: MRR arithmetic, seed means, and one real tiny run."""

from __future__ import annotations

import json

import pytest

from benchmarks import length_generalization as lg


def row(task, enc, ood, seed=0, iid=1.0):
    return {
        "task": task,
        "encoding": enc,
        "seed": seed,
        "ood_accuracy": ood,
        "iid_accuracy": iid,
        "seconds": 1.0,
    }


def test_mean_reciprocal_rank_by_hand():
    rows = [
        row("a", "x", 0.9),
        row("a", "y", 0.5),
        row("a", "z", 0.1),
        row("b", "x", 0.2),
        row("b", "y", 0.8),
        row("b", "z", 0.8),
    ]
    mrr = lg.mean_reciprocal_rank(rows)
    # task a: x 1st, y 2nd, z 3rd; task b: y and z tie for 1st, x 3rd
    assert mrr == pytest.approx({"x": (1 + 1 / 3) / 2, "y": (1 / 2 + 1) / 2, "z": (1 / 3 + 1) / 2})


def test_mrr_ranks_seed_means():
    rows = [row("a", "x", 1.0, seed=0), row("a", "x", 0.0, seed=1), row("a", "y", 0.6)]
    assert lg.mean_reciprocal_rank(rows) == {"y": 1.0, "x": 0.5}


def test_summary_averages_over_seeds():
    rows = [row("a", "x", 0.2, seed=0, iid=1.0), row("a", "x", 0.4, seed=1, iid=0.5)]
    (summary,) = lg.summarize(rows)
    assert summary["seeds"] == 2
    assert summary["ood_accuracy"] == pytest.approx(0.3) and summary["iid_accuracy"] == pytest.approx(0.75)


def tiny_copy_spec(encoding, steps, num_train, num_test, **extra):
    """A copy_repeat run spec for a 1-layer dim-16 model: train lengths 1-3, test 4-5."""
    return {
        "task": "copy_repeat",
        "task_options": {"train_lengths": [1, 3], "test_lengths": [4, 5]},
        "encoding": encoding,
        "seed": 0,
        "threads": 1,
        "model": {"dim": 16, "num_heads": 2, "num_layers": 1},
        "training": {"steps": steps, "batch_size": 8, "lr": 1e-3, "num_train": num_train, "num_test": num_test},
        **extra,
    }


def test_one_tiny_run_reports_per_length_accuracy(capsys):
    result = lg.run_one(tiny_copy_spec("alibi", steps=5, num_train=64, num_test=10))
    assert "copy_repeat alibi seed 0 step" not in capsys.readouterr().err  # no print_loss: no loss lines
    assert set(result["per_length"]) <= {1, 2, 3, 4, 5}
    assert sum(v["total"] for v in result["per_length"].values()) == 20
    assert 0.0 <= result["iid_accuracy"] <= 1.0 and 0.0 <= result["ood_accuracy"] <= 1.0
    assert result["parameters"] >= result["parameters_without_pe"]


def test_encoder_decoder_run_and_task_keys():
    spec = {
        "task": "contextual_counting",
        "task_options": {
            "train_lengths": [4, 6],
            "test_lengths": [7, 8],
            "train_regions": [1, 2],
            "test_regions": [1, 2],
        },
        "architecture": "encdec_bidirectional",
        "encoding": "rope",
        "seed": 0,
        "threads": 1,
        "model": {"dim": 16, "num_heads": 2, "num_layers": 2},
        "training": {"steps": 3, "batch_size": 8, "lr": 1e-3, "num_train": 32, "num_test": 6},
    }
    result = lg.run_one(spec)
    assert result["architecture"] == "encdec_bidirectional"
    assert sum(v["total"] for v in result["per_length"].values()) == 12
    assert lg.task_key(result) == "contextual_counting (encdec_bidirectional)"
    assert lg.task_key(row("copy_repeat", "x", 0.1)) == "copy_repeat"


def store_nope_copy_run(runs_dir, spec, ood, per_length, train_lengths, test_lengths):
    """Write a finished copy_repeat NoPE seed-0 run (IID 1.0) under ``runs_dir``, as the benchmark stores it."""
    stored = {**row("copy_repeat", "nope", ood), "architecture": "decoder", "per_length": per_length,
              "final_train_loss": 0.1, "parameters": 10, "parameters_without_pe": 10,
              "train_lengths": train_lengths, "test_lengths": test_lengths, "spec": spec}
    runs_dir.mkdir(parents=True)
    (runs_dir / "copy_repeat__nope__seed0.json").write_text(json.dumps(stored))


def test_report_only_rebuilds_the_report_from_stored_runs(tmp_path):
    spec = {"task": "copy_repeat", "task_options": {"train_lengths": [1, 8], "test_lengths": [9, 16]},
            "encoding": "nope", "seed": 0, "model": {**lg.QUICK_MODEL, "scale_embeddings": True},
            "training": lg.QUICK_TRAINING}
    store_nope_copy_run(tmp_path / "length_generalization" / "runs" / "quick", spec, 0.5,
                        {"3": {"correct": 1, "total": 2}, "12": {"correct": 1, "total": 2}}, [1, 8], [9, 16])
    assert lg.main(["--quick", "--report-only", "--encoders", "nope", "rope", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "length_generalization" / "report.md").read_text()
    assert "| copy_repeat | nope | 1 | 1.000 | 0.500 |" in report and "from 1 stored runs" in report
    assert (tmp_path / "length_generalization" / "accuracy_vs_length.png").exists()


def test_encoder_options_reach_the_model():
    # rope runs as in the paper's code (rotary on 25 % of each head's dims); the options are forwarded,
    # so an invalid one is refused by the encoder rather than ignored
    assert lg.ENCODING_OPTIONS["rope"] == {"rotary_fraction": 0.25}
    spec = tiny_copy_spec("rope", steps=1, num_train=16, num_test=2, encoding_options={"rotary_fraction": 1.5})
    with pytest.raises(ValueError, match="rotary_fraction must be in"):
        lg.run_one(spec)


def test_training_preset_applies_per_task_changes_then_the_steps_override():
    assert lg.training_preset("copy_repeat", quick=False) == lg.FULL_TRAINING
    reverse = lg.training_preset("reverse", quick=False)
    assert reverse == {**lg.FULL_TRAINING, "steps": lg.TASK_TRAINING["reverse"]["steps"]}
    assert reverse["steps"] != lg.FULL_TRAINING["steps"]
    assert lg.training_preset("reverse", quick=True) == lg.QUICK_TRAINING  # quick runs keep one preset
    assert lg.training_preset("reverse", quick=False, steps=7)["steps"] == 7


def test_a_run_records_its_loss_history_and_prints_it_when_asked(capsys):
    spec = tiny_copy_spec("nope", steps=40, num_train=64, num_test=2, print_loss=True)
    result = lg.run_one(spec)
    assert result["spec"] == {k: v for k, v in spec.items() if k not in ("threads", "print_loss")}
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("copy_repeat nope seed 0")]
    assert len(printed) == 20 and printed[-1].startswith("copy_repeat nope seed 0 step 40/40: loss ")
    history = result["loss_history"]
    assert [step for step, _ in history] == [2 * (i + 1) for i in range(20)]  # windows of steps // 20
    assert history[-1][1] < history[0][1]


def test_rejects_zero_threads(capsys):
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--threads", "0"])
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err


def paper_summary(task, ood, iid=1.0):
    return [{"task": task, "encoding": e, "seeds": 1, "iid_accuracy": iid, "ood_accuracy": v} for e, v in ood.items()]


def test_claims_check_the_ranking_of_the_paper():
    ok = paper_summary("copy_repeat", {"nope": 0.6, "t5": 0.5, "alibi": 0.4, "rope": 0.0, "sinusoidal": 0.0})
    bad = paper_summary("reverse", {"nope": 0.6, "t5": 0.1, "alibi": 0.4, "rope": 0.0, "sinusoidal": 0.0})
    lines = lg.claims(ok + bad)
    assert "copy_repeat" in lines[0] and "**holds**" in lines[0] and "nope 0.600 (paper 0.986, 1 seed)" in lines[0]
    assert "reverse" in lines[1] and "**does not hold**" in lines[1]
    assert "cope_counting" in lines[2] and "not measured" in lines[2]


def test_claims_flag_a_task_not_learned_in_distribution_and_missing_encoders():
    rows = paper_summary("copy_repeat", {"nope": 0.6, "t5": 0.5, "alibi": 0.4, "rope": 0.0, "sinusoidal": 0.0})
    rows[3]["iid_accuracy"] = 0.5
    lines = lg.claims(rows + paper_summary("reverse", {"nope": 0.1}))
    assert "Not learned in distribution (IID < 0.9) by ['rope']" in lines[0]
    assert "not measured (no runs of ['t5', 'alibi', 'rope', 'sinusoidal'])" in lines[1]


def test_claims_compare_counting_errors():
    rows = [{"task": "cope_counting", "encoding": e, "seeds": 2, "iid_accuracy": acc, "ood_accuracy": 0.0}
            for e, acc in {"cope": 0.95, "t5": 0.94, "sinusoidal": 0.5}.items()]
    (line,) = [x for x in lg.claims(rows) if x.startswith("- cope_counting")]
    assert "cope 5.0 % (paper 1.2 %, 2 seeds)" in line and "t5 6.0 %" in line and "**holds**" in line
    rows[0]["iid_accuracy"] = 0.9
    (line,) = [x for x in lg.claims(rows) if x.startswith("- cope_counting")]
    assert "**does not hold**" in line


def test_model_size_is_refused_for_quick_runs(capsys):
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--model-size", "large"])
    assert "--model-size large: quick runs always use the quick trunk" in capsys.readouterr().err


def test_a_non_base_model_size_has_its_own_runs_and_report(tmp_path, monkeypatch):
    assert lg.MODEL_SIZES["base"] == lg.FULL_MODEL
    # a tiny stand-in for the large trunk and one stored run of it, so --report-only needs no training
    tiny = {"dim": 16, "num_heads": 2, "num_layers": 1}
    monkeypatch.setitem(lg.MODEL_SIZES, "large", tiny)
    spec = {"task": "copy_repeat", "task_options": lg.FULL_TASKS["copy_repeat"], "encoding": "nope", "seed": 0,
            "model": {**tiny, "scale_embeddings": True}, "training": lg.training_preset("copy_repeat", quick=False)}
    store_nope_copy_run(tmp_path / "length_generalization_large" / "runs" / "full", spec, 0.25,
                        {"5": {"correct": 1, "total": 1}, "30": {"correct": 1, "total": 4}}, [1, 20], [21, 40])
    argv = ["--report-only", "--tasks", "copy_repeat", "--encoders", "nope", "--seeds", "0", "--out", str(tmp_path)]
    assert lg.main([*argv, "--model-size", "large"]) == 0
    report = (tmp_path / "length_generalization_large" / "report.md").read_text()
    assert "'dim': 16" in report and "| copy_repeat | nope | 1 | 1.000 | 0.250 |" in report
    assert not (tmp_path / "length_generalization").exists()  # the base benchmark's files are untouched
    with pytest.raises(SystemExit):  # the base size finds no stored run of its own
        lg.main(argv)


def test_dropout_reaches_the_model_and_is_checked(capsys):
    spec = tiny_copy_spec("nope", steps=1, num_train=16, num_test=2)
    spec["model"] = {**spec["model"], "dropout": 1.5}  # forwarded, so the model refuses it
    with pytest.raises(ValueError, match="dropout probability"):
        lg.run_one(spec)
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--dropout", "1.0"])
    assert "--dropout must be in [0, 1), got 1.0" in capsys.readouterr().err


def test_dropout_runs_have_their_own_directory(tmp_path, capsys):
    # --report-only with no stored run fails, but only after naming the variant's directory
    with pytest.raises(SystemExit):
        lg.main(["--report-only", "--tasks", "copy_repeat", "--encoders", "nope", "--seeds", "0",
                 "--dropout", "0.1", "--model-size", "large", "--out", str(tmp_path)])
    assert "length_generalization_large_dropout0.1: --report-only" in capsys.readouterr().out
    assert (tmp_path / "length_generalization_large_dropout0.1" / "runs" / "full").is_dir()


def test_a_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_run(tmp_path):
    # 10 steps, a checkpoint every 4: the first run leaves last.ckpt at step 8 behind (the benchmark's
    # main deletes it once the row is stored; run_one does not). Running the same spec again resumes
    # there and trains steps 9-10 on the same batches, so it must end exactly as the first run did.
    spec = tiny_copy_spec("alibi", steps=10, num_train=64, num_test=10, checkpoint_every=4,
                          checkpoint_dir=str(tmp_path / "ckpt"))
    first = lg.run_one(spec)
    assert first["resumed"] is False and (tmp_path / "ckpt" / "last.ckpt").exists()
    second = lg.run_one(spec)
    assert second["resumed"] is True
    assert second["loss_history"] == first["loss_history"]  # the history before step 8 came from the checkpoint
    assert second["final_train_loss"] == first["final_train_loss"]
    assert second["per_length"] == first["per_length"]
    assert second["spec"] == first["spec"] == {k: v for k, v in spec.items()
                                               if k not in ("threads", "checkpoint_every", "checkpoint_dir")}


def test_a_checkpoint_of_another_configuration_is_not_resumed(tmp_path):
    directory = tmp_path / "ckpt"
    spec = tiny_copy_spec("nope", steps=4, num_train=32, num_test=2, checkpoint_every=2, checkpoint_dir=str(directory))
    lg.run_one(spec)
    other = {**spec, "training": {**spec["training"], "lr": 2e-3}}
    assert lg.run_one(other)["resumed"] is False
    assert __import__("json").loads((directory / "spec.json").read_text())["training"]["lr"] == 2e-3


def test_rejects_checkpoint_every_below_one(capsys):
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--checkpoint-every", "0"])
    assert "--checkpoint-every must be >= 1 step, got 0" in capsys.readouterr().err


def test_a_run_stores_how_its_answers_failed_and_the_report_sums_the_ood_ones():
    from pe_toolkit.training.exact_match import OUTCOMES

    assert lg.FAILURES == OUTCOMES[1:] and OUTCOMES[0] == "correct"
    result = lg.run_one(tiny_copy_spec("alibi", steps=5, num_train=64, num_test=10))
    for v in result["per_length"].values():
        assert v["correct"] + sum(v[name] for name in lg.FAILURES) == v["total"]
    ood = {"5": {"correct": 1, "total": 10, "stopped_early": 6, "ran_over": 2, "wrong_tokens": 1},
           "4": {"correct": 0, "total": 10, "stopped_early": 10, "ran_over": 0, "wrong_tokens": 0},
           "2": {"correct": 0, "total": 5, "stopped_early": 0, "ran_over": 0, "wrong_tokens": 5}}  # IID: left out
    rows = [{**row("copy_repeat", "t5", 0.05), "train_lengths": [1, 3], "per_length": ood},
            {**row("copy_repeat", "nope", 0.5), "train_lengths": [1, 3],
             "per_length": {"5": {"correct": 1, "total": 2}}}]  # stored before outcomes existed: left out
    (summary,) = lg.failure_summary(rows)
    assert summary == {"task": "copy_repeat", "encoding": "t5", "answers": 20,
                       "stopped_early": 16 / 20, "ran_over": 2 / 20, "wrong_tokens": 1 / 20}


def test_cope_npos_max_covers_the_longest_training_sequence():
    """CoPE runs as the paper's code: npos = training context + 1, so no training position is clamped."""
    from pe_toolkit.training import TaskDataModule

    assert lg.ENCODING_OPTIONS["cope"] == {"npos_max": lg.CONTEXT}
    spec = tiny_copy_spec("cope", steps=1, num_train=16, num_test=2, encoding_options={"npos_max": lg.CONTEXT})
    result = lg.run_one(spec)
    data = TaskDataModule("copy_repeat", spec["task_options"], num_train=16, num_val=0, num_test=2, batch_size=8,
                          seed=0)
    longest_train = data.max_sequence_length(["train"])
    assert longest_train < data.max_sequence_length()  # test lengths 4-5 are longer than train 1-3
    assert result["encoding_options"] == {"npos_max": longest_train + 1}
    assert result["spec"]["encoding_options"] == {"npos_max": "context"}
    # parameters with the PE = without + npos_max x head_dim (one table per layer; 1 layer, head_dim 8)
    assert result["parameters"] - result["parameters_without_pe"] == (longest_train + 1) * 8


def test_resolve_encoding_options_leaves_numbers_alone():
    assert lg.resolve_encoding_options({"npos_max": 16}, data=None) == {"npos_max": 16}
    assert lg.resolve_encoding_options(None, data=None) == {}
