"""The length-generalization benchmark: presets, every registered task, intervals, verdicts, tiny real runs."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from benchmarks import length_generalization as lg
from benchmarks.common import mean_interval
from benchmarks.presets import available_presets, load_preset
from pe_toolkit.tasks import get_task, list_tasks, task_options

CPU = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}


def row(task, enc, ood, seed=0, iid=1.0):
    return {"task": task, "encoding": enc, "seed": seed, "ood_accuracy": ood, "iid_accuracy": iid, "seconds": 1.0}


def test_mean_reciprocal_rank_by_hand():
    rows = [row("a", "x", 0.9), row("a", "y", 0.5), row("a", "z", 0.1),
            row("b", "x", 0.2), row("b", "y", 0.8), row("b", "z", 0.8)]
    mrr = lg.mean_reciprocal_rank(rows)
    # task a: x 1st, y 2nd, z 3rd; task b: y and z tie for 1st, x 3rd
    assert mrr == pytest.approx({"x": (1 + 1 / 3) / 2, "y": (1 / 2 + 1) / 2, "z": (1 / 3 + 1) / 2})


def test_mrr_ranks_seed_means():
    rows = [row("a", "x", 1.0, seed=0), row("a", "x", 0.0, seed=1), row("a", "y", 0.6)]
    assert lg.mean_reciprocal_rank(rows) == {"y": 1.0, "x": 0.5}


def test_summary_rows_hold_the_seed_intervals():
    rows = [row("a", "x", 0.2, seed=0, iid=1.0), row("a", "x", 0.4, seed=1, iid=0.5), row("a", "x", 0.3, seed=2)]
    (summary,) = lg.summarize(rows)
    assert summary["seeds"] == 3
    assert summary["ood"] == pytest.approx(mean_interval([0.2, 0.4, 0.3]))
    assert summary["iid"] == pytest.approx(mean_interval([1.0, 0.5, 1.0]))
    assert summary["ood"]["low"] < 0.3 < summary["ood"]["high"]


# ------------------------------------------------------------------------------------------- tasks
def test_every_registered_task_is_accepted_and_generates_its_evaluation_sets():
    tasks = list_tasks()
    assert len(tasks) >= 22
    for name in tasks:
        assert lg.parse_task(name) == (name, {})
        task = get_task(name)
        for split in ("train", "test"):
            lengths = lg.evaluated_lengths(task, split, 4)
            assert lengths[-1] == task.lengths(split)[-1] and set(lengths) <= set(task.lengths(split))
            examples = lg.evaluation_examples(task, split, lengths, 2, seed=0)
            assert [ex.length for ex in examples] == [n for n in lengths for _ in range(2)], name


def test_scratchpad_formats_are_accepted_and_checked():
    with_scratchpad = [t for t in list_tasks() if "scratchpad" in task_options(t)]
    assert "addition" in with_scratchpad and "parity" in with_scratchpad
    for name in with_scratchpad:
        assert lg.parse_task(f"{name}:icovr") == (name, {"scratchpad": "icovr"})
    assert lg.parse_task("parity:10110") == ("parity", {"scratchpad": "10110"})
    assert lg.parse_task("addition:none") == ("addition", {"scratchpad": None})
    assert lg.parse_task("addition:empty") == ("addition", {"scratchpad": ""})
    assert lg.task_key({"task": "addition", "task_options": {"scratchpad": "icovr"}}) == "addition[scratchpad icovr]"
    with pytest.raises(ValueError, match="'copy_repeat' has no scratchpad option; tasks with one: addition"):
        lg.parse_task("copy_repeat:icovr")
    with pytest.raises(ValueError, match="addition:xyz"):
        lg.parse_task("addition:xyz")


def test_an_unknown_task_is_rejected_naming_it_and_the_registered_ones(capsys):
    with pytest.raises(ValueError, match="unknown task 'copy_repeet'; registered tasks: addition, ") as error:
        lg.parse_task("copy_repeet")
    assert all(name in str(error.value) for name in list_tasks())
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--tasks", "copy_repeet"])
    assert "unknown task 'copy_repeet'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- presets
@pytest.mark.parametrize("name", ["quick", "full", "gpu"])
def test_presets_load_and_name_only_registered_tasks_and_encoders(name):
    import pe_toolkit as pet

    assert set(available_presets("length_generalization")) == {"quick", "full", "gpu"}
    preset = load_preset("length_generalization", name)
    specs = lg.build_specs(preset, [lg.parse_task(t) for t in preset["run"]], encoders=None,
                           seeds=preset["seeds"], model=preset["model"], steps=None, threads=1, device=CPU,
                           print_loss=False)
    for spec in specs:
        get_task(spec["task"], **{k: tuple(v) if isinstance(v, list) else v for k, v in spec["task_options"].items()})
        assert spec["encoding"] in pet.list_encoders()
    for task in preset["tasks"]:  # every catalogue entry is a registered task with valid options
        entry = lg.task_entry(preset, task)
        get_task(task, **{k: tuple(v) if isinstance(v, list) else v for k, v in entry["options"].items()})
    if name != "quick":
        assert len(preset["seeds"]) >= 3 and preset["evaluation"]["per_length"] >= 100
        counting = lg.task_entry(preset, "cope_counting")
        assert counting["early_stop"]["target_error"] == 0.05 and "music_relative" in counting["encoders"]
        regions = lg.task_entry(preset, "contextual_counting")["options"]
        assert regions["test_regions"][0] > regions["train_regions"][1]  # more regions at test
        assert "reverse_x2" in preset["run"] and "reverse" not in preset["run"]


def test_the_gpu_preset_is_bigger_than_the_cpu_one():
    full, gpu = load_preset("length_generalization", "full"), load_preset("length_generalization", "gpu")
    assert gpu["model"]["dim"] * gpu["model"]["num_layers"] > full["model"]["dim"] * full["model"]["num_layers"]
    assert len(gpu["seeds"]) > len(full["seeds"]) and gpu["training"]["num_train"] > full["training"]["num_train"]


def test_cli_overrides_and_the_device_reach_every_spec(tmp_path, capsys):
    preset = load_preset("length_generalization", "full", overrides=["training.steps=7", "seeds=[4, 5]"])
    specs = lg.build_specs(preset, [("copy_repeat", {}), ("cope_counting", {})], encoders=None,
                           seeds=preset["seeds"], model=preset["model"], steps=None, threads=3,
                           device={"accelerator": "cuda", "devices": 1, "precision": "bf16-mixed"}, print_loss=False)
    copy = [s for s in specs if s["task"] == "copy_repeat"]
    assert {s["training"]["steps"] for s in copy} == {7} and {s["seed"] for s in specs} == {4, 5}
    counting_steps = lg.task_entry(preset, "cope_counting")["training"]["steps"]  # the task's own budget
    assert counting_steps != 7 and {s["training"]["steps"] for s in specs if s["task"] == "cope_counting"} == {
        counting_steps}
    assert all(lg.stored_spec(s)["threads"] == 3 and lg.stored_spec(s)["device"]["precision"] == "bf16-mixed"
               for s in specs)  # threads and device are part of a run's identity
    with pytest.raises(SystemExit):
        lg.main(["--quick", "--set", "training.stepz=3", "--out", str(tmp_path)])
    assert "preset key 'training.stepz' does not exist" in capsys.readouterr().err


def tiny_spec(encoding="alibi", steps=5, **extra):
    """A copy_repeat run of a 1-layer dim-16 model: train lengths 1-3, test 4-5, 3 examples per length."""
    return {
        "task": "copy_repeat",
        "task_options": {"train_lengths": [1, 3], "test_lengths": [4, 5]},
        "encoding": encoding,
        "seed": 0,
        "threads": 1,
        "device": CPU,
        "model": {"dim": 16, "num_heads": 2, "num_layers": 1},
        "training": {"steps": steps, "batch_size": 8, "lr": 1e-3, "num_train": 64},
        "evaluation": {"per_length": 3, "length_stride": 1},
        **extra,
    }


def test_a_device_the_trainer_refuses_reaches_it():
    with pytest.raises(ValueError, match="accelerator must be one of"):
        lg.run_one(tiny_spec(steps=1, device={"accelerator": "tpu", "devices": 1, "precision": "32-true"}))


# ------------------------------------------------------------------------------------------- runs
def test_one_tiny_run_tests_a_fixed_number_of_examples_per_length_in_each_split(capsys):
    result = lg.run_one(tiny_spec())
    assert "copy_repeat alibi seed 0 step" not in capsys.readouterr().err  # no print_loss: no loss lines
    assert set(result["per_length_iid"]) == {1, 2, 3} and set(result["per_length_ood"]) == {4, 5}
    assert all(v["total"] == 3 for part in ("iid", "ood") for v in result[f"per_length_{part}"].values())
    for v in result["per_length_ood"].values():
        assert v["correct"] + sum(v[name] for name in lg.FAILURES) == v["total"]
    assert 0.0 <= result["iid_accuracy"] <= 1.0 and 0.0 <= result["ood_accuracy"] <= 1.0
    assert result["parameters"] >= result["parameters_without_pe"] and result["steps_done"] == 5


@pytest.mark.parametrize("name", ["addition:icovr", "scan_length", "pcfg_productivity", "sort_multi", "lego"])
def test_tasks_the_old_benchmark_could_not_reach_run_end_to_end(name):
    task, extra = lg.parse_task(name)
    entry = lg.task_entry(load_preset("length_generalization", "full"), task)
    short = {"train_lengths": [4, 4], "test_lengths": [5, 5]}  # short answers: an untrained model decodes fast
    spec = {**tiny_spec("nope", steps=2), "task": task, "task_options": {**entry["options"], **extra, **short},
            "evaluation": {"per_length": 2, "length_stride": 1}}
    result = lg.run_one(spec)
    assert set(result["per_length_iid"]) == {4} and set(result["per_length_ood"]) == {5}
    assert result["per_length_ood"][5]["total"] == 2
    assert lg.task_key(result) == task + ("[scratchpad icovr]" if task == "addition" else "")


def test_a_same_seed_rerun_reproduces_the_run():
    spec = tiny_spec("t5", steps=8)
    first, second = lg.run_one(spec), lg.run_one(spec)
    for key in ("loss_history", "final_train_loss", "per_length_iid", "per_length_ood", "spec"):
        assert first[key] == second[key], key
    other = lg.run_one({**spec, "seed": 1})
    assert other["loss_history"] != first["loss_history"]  # the seed matters: the comparison can fail


def test_density_shift_tasks_test_the_other_split_at_the_same_lengths():
    spec = {**tiny_spec("nope", steps=2), "task": "flip_flop",
            "task_options": {"train_lengths": [4, 5], "test_lengths": [4, 5], "test_p_ignore": 0.98}}
    result = lg.run_one(spec)
    assert set(result["per_length_iid"]) == set(result["per_length_ood"]) == {4, 5}


def test_early_stop_records_the_validation_curve_and_stops_below_the_target():
    spec = tiny_spec("nope", steps=6, early_stop={"target_error": 1e-9, "every_n_steps": 2, "num_val": 8})
    result = lg.run_one(spec)  # an unreachable target: the whole budget, a validation every 2 steps
    assert [s for s, _ in result["validation_curve"]] == [2, 4, 6] and result["target_reached"] is None
    assert result["steps_done"] == 6

    class Trainer:
        sanity_checking, global_step, should_stop = False, 250, False

    class Module:
        val_results = {3: (48, 50), 9: (49, 50)}  # 3 wrong of 100: error 0.03

    curve = lg.ValidationCurve(0.05)
    curve.on_validation_end(Trainer, Module)
    assert Trainer.should_stop and curve.reached_at == 250 and curve.history == [(250, pytest.approx(0.03))]
    Trainer.should_stop, Module.val_results = False, {3: (90, 100)}
    lg.ValidationCurve(0.05).on_validation_end(Trainer, Module)
    assert not Trainer.should_stop


def test_encoder_decoder_run_and_task_keys():
    spec = {**tiny_spec("rope", steps=3), "task": "contextual_counting", "architecture": "encdec_bidirectional",
            "model": {"dim": 16, "num_heads": 2, "num_layers": 2},
            "task_options": {"train_lengths": [4, 6], "test_lengths": [7, 8], "train_regions": [1, 2],
                             "test_regions": [1, 2]}}
    result = lg.run_one(spec)
    assert result["architecture"] == "encdec_bidirectional"
    assert sum(v["total"] for v in result["per_length_ood"].values()) == 6
    assert lg.task_key(result) == "contextual_counting (encdec_bidirectional)"
    assert lg.task_key(row("copy_repeat", "x", 0.1)) == "copy_repeat"


def test_encoder_options_reach_the_model():
    assert lg.ENCODING_OPTIONS["rope"] == {"rotary_fraction": 0.25}
    with pytest.raises(ValueError, match="rotary_fraction must be in"):
        lg.run_one(tiny_spec("rope", steps=1, encoding_options={"rotary_fraction": 1.5}))


def test_context_options_cover_the_longest_training_sequence():
    """CoPE's npos and the paper's relative PE's distance table reach the training context + 1."""
    from pe_toolkit.training import TaskDataModule

    data = TaskDataModule("copy_repeat", {"train_lengths": [1, 3], "test_lengths": [4, 5]}, num_train=64,
                          num_val=0, num_test=0, batch_size=8, seed=0)
    context = data.max_sequence_length(["train"]) + 1
    result = lg.run_one(tiny_spec("cope", steps=1, encoding_options={"npos_max": lg.CONTEXT}))
    assert result["encoding_options"] == {"npos_max": context}
    assert result["spec"]["encoding_options"] == {"npos_max": "context"}
    assert result["parameters"] - result["parameters_without_pe"] == context * 8  # one table, head_dim 8
    options = lg.ENCODING_OPTIONS["music_relative"]
    relative = lg.run_one(tiny_spec("music_relative", steps=1, encoding_options=options))
    assert relative["encoding_options"] == {"max_distance": context, "share_heads": True}
    assert relative["parameters"] - relative["parameters_without_pe"] == (2 * context + 1) * 8
    assert lg.resolve_encoding_options({"npos_max": 16}, data=None) == {"npos_max": 16}


def test_a_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_run(tmp_path):
    spec = tiny_spec("alibi", steps=10, checkpoint_every=4, checkpoint_dir=str(tmp_path / "ckpt"))
    first = lg.run_one(spec)
    assert first["resumed"] is False and (tmp_path / "ckpt" / "last.ckpt").exists()
    second = lg.run_one(spec)
    assert second["resumed"] is True
    assert second["loss_history"] == first["loss_history"] and second["per_length_ood"] == first["per_length_ood"]
    assert second["spec"] == first["spec"] == {k: v for k, v in spec.items()
                                               if k not in ("checkpoint_every", "checkpoint_dir")}


# ------------------------------------------------------------------------------------------- claims
def summary_row(task, enc, values, iid=1.0):
    return {"task": task, "encoding": enc, "seeds": len(values), "iid": mean_interval([iid] * len(values)),
            "ood": mean_interval(values)}


def copy_claim(summary, a="nope", b="rope"):
    (claim,) = [r for r in lg.claims(summary) if r["task"] == "copy_repeat" and r["a"] == a and r["b"] == b]
    return claim


def test_claim_verdicts_come_from_the_intervals():
    high, low = [0.8, 0.82, 0.81], [0, 0, 0.01]
    separated = [summary_row("copy_repeat", "nope", high), summary_row("copy_repeat", "rope", low)]
    results = {(r["a"], r["b"]): r for r in lg.claims(separated) if r["task"] == "copy_repeat"}
    assert results[("nope", "rope")]["verdict"] == "reproduced"
    assert results[("t5", "rope")]["verdict"] == "untested" and "no runs of ['t5']" in results[("t5", "rope")]["why"]
    overlapping = [summary_row("copy_repeat", "nope", [0.1, 0.9, 0.5]), summary_row("copy_repeat", "rope", [0, 0.3, 0])]
    claim = copy_claim(overlapping)
    assert claim["verdict"] == "not reproduced (intervals overlap)"
    reversed_ = [summary_row("copy_repeat", "nope", low), summary_row("copy_repeat", "rope", high)]
    claim = copy_claim(reversed_)
    assert claim["verdict"] == "not reproduced (reversed)"
    lines = lg.claim_lines([claim])
    assert "**not reproduced (reversed)**" in lines[0] and "(n=3)" in lines[0]


def test_claims_untested_with_one_seed_or_a_task_not_learned():
    one_seed = [summary_row("copy_repeat", "nope", [0.9]), summary_row("copy_repeat", "rope", [0.0])]
    claim = copy_claim(one_seed)
    assert claim["verdict"] == "untested" and "fewer than 2 seeds" in claim["why"]
    unlearned = [summary_row("copy_repeat", "nope", [0.8, 0.82, 0.81]),
                 summary_row("copy_repeat", "rope", [0, 0, 0.01], iid=0.5)]
    claim = copy_claim(unlearned)
    assert claim["verdict"] == "untested"
    assert "not learned in distribution by ['rope']" in claim["why"]


def test_out_of_distribution_claims_of_every_paper_need_the_task_learned_in_distribution():
    """Golkar's contextual counting and CoPE's selective copy / flip-flop compare OOD accuracy: a pair that
    did not learn the task in distribution is untested, not a tie (counting's claim is on the IID error)."""
    causal, bidirectional = "contextual_counting (encdec_causal)", "contextual_counting (encdec_bidirectional)"
    summary = [summary_row(causal, "nope", [0.0, 0.01, 0.0], iid=0.1),
               summary_row(bidirectional, "nope", [0.0, 0.0, 0.0], iid=0.1),
               summary_row("flip_flop", "cope", [0.6, 0.62, 0.61], iid=0.95),
               summary_row("flip_flop", "rope", [0.2, 0.21, 0.2], iid=0.95)]
    results = lg.claims(summary)
    (golkar,) = [r for r in results if r["task"] == causal and r.get("task_b") == bidirectional and r["a"] == "nope"]
    assert golkar["verdict"] == "untested" and "not learned in distribution" in golkar["why"]
    (flip,) = [r for r in results if r["task"] == "flip_flop" and r["b"] == "rope"]
    assert flip["verdict"] == "reproduced"


def test_reverse_is_compared_only_with_the_papers_reverse_x2_and_counting_by_its_error():
    tasks = {c["task"] for c in lg.claim_list()}
    assert "reverse_x2" in tasks and "reverse" not in tasks
    counting = [summary_row("cope_counting", "cope", [0.5] * 3, iid=0.99),
                summary_row("cope_counting", "music_relative", [0.5] * 3, iid=0.8)]
    counting[0]["iid"] = mean_interval([0.99, 0.98, 0.985])
    counting[1]["iid"] = mean_interval([0.80, 0.82, 0.81])
    (claim,) = [r for r in lg.claims(counting) if r["task"] == "cope_counting" and r["b"] == "music_relative"]
    assert claim["verdict"] == "reproduced" and claim["a_value"]["mean"] == pytest.approx(1 - 0.985)


# ------------------------------------------------------------------------------------------- end to end
def test_main_writes_intervals_and_a_resumed_rerun_reuses_every_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lg, "worker_pool", lambda jobs: concurrent.futures.ThreadPoolExecutor(1))
    argv = ["--quick", "--encoders", "nope", "--seeds", "0", "1", "--set", "training.steps=3",
            "--set", "training.num_train=64", "--set", "evaluation.per_length=2",
            "--set", "tasks.copy_repeat.options.test_lengths=[9,10]", "--accelerator", "cpu", "--out", str(tmp_path)]
    assert lg.main(argv) == 0
    out = tmp_path / "length_generalization"
    report = (out / "report.md").read_text()
    assert "| copy_repeat | nope | 2 |" in report and "(n=2)" in report and "Against the papers' claims" in report
    runs = sorted(p.name for p in (out / "runs" / "quick").glob("*.json"))
    assert runs == ["copy_repeat__nope__seed0.json", "copy_repeat__nope__seed1.json"]
    stored = json.loads((out / "runs" / "quick" / runs[0]).read_text())
    assert stored["spec"]["threads"] == 1 and stored["spec"]["device"]["accelerator"] == "cpu"
    assert (out / "accuracy_vs_length.png").exists()
    capsys.readouterr()
    assert lg.main([*argv, "--resume"]) == 0
    assert "2 runs (2 reused)" in capsys.readouterr().out
    store = lg.RunStore(out / "runs" / "quick", resume=True)  # another thread count is another run
    assert store.load(runs[0][:-5], stored["spec"]) is not None
    assert store.load(runs[0][:-5], {**stored["spec"], "threads": 2}) is None


def test_argument_checks(capsys):
    for argv, message in ((["--threads", "0"], "--threads must be >= 1, got 0"),
                          (["--checkpoint-every", "0"], "--checkpoint-every must be >= 1 step, got 0"),
                          (["--dropout", "1.0"], "--dropout must be in [0, 1), got 1.0"),
                          (["--model-size", "large"], "--model-size large: quick runs always use the quick trunk")):
        with pytest.raises(SystemExit):
            lg.main(["--quick", *argv])
        assert message in capsys.readouterr().err
