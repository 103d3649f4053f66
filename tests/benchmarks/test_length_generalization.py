"""The length-generalization benchmark: presets, every registered task, intervals, verdicts, tiny real runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pe_toolkit.bench.cli import main
from pe_toolkit.bench.config import load_config
from pe_toolkit.bench.verdict import claims_table, summarize
from pe_toolkit.benchmarks import length_generalization as lg
from pe_toolkit.tasks import get_task, list_tasks, task_options
from pe_toolkit.training import callbacks

BENCHMARK = lg.LengthGeneralization()

CPU = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}


def row(task, enc, ood, seed=0, iid=1.0):
    return {"task": task, "encoding": enc, "seed": seed, "ood_accuracy": ood, "iid_accuracy": iid, "seconds": 1.0}


def test_mean_reciprocal_rank_by_hand():
    rows = [row("a", "x", 0.9), row("a", "y", 0.5), row("a", "z", 0.1),
            row("b", "x", 0.2), row("b", "y", 0.8), row("b", "z", 0.8)]
    mrr = lg.mean_reciprocal_rank(lg.summarize_runs(rows))
    # task a: x 1st, y 2nd, z 3rd; task b: y and z tie for 1st, x 3rd
    assert mrr == pytest.approx({"x": (1 + 1 / 3) / 2, "y": (1 / 2 + 1) / 2, "z": (1 / 3 + 1) / 2})


def test_mrr_ranks_seed_means():
    rows = [row("a", "x", 1.0, seed=0), row("a", "x", 0.0, seed=1), row("a", "y", 0.6)]
    assert lg.mean_reciprocal_rank(lg.summarize_runs(rows)) == {"y": 1.0, "x": 0.5}
    # an encoder without any OOD value is not ranked on that task
    assert lg.mean_reciprocal_rank(lg.summarize_runs([*rows, row("a", "z", None)])) == {"y": 1.0, "x": 0.5}


def test_summary_rows_hold_the_seed_intervals_within_0_and_1():
    rows = [row("a", "x", 0.2, seed=0, iid=1.0), row("a", "x", 0.4, seed=1, iid=0.5), row("a", "x", 0.3, seed=2)]
    (summary,) = lg.summarize_runs(rows)
    assert summary["runs"] == 3 and summary["task"] == "a" and summary["encoding"] == "x"
    ood, iid = summarize([0.2, 0.4, 0.3]), summarize([1.0, 0.5, 1.0])  # the unbounded t intervals
    assert (summary["ood_accuracy"]["mean"], summary["ood_accuracy"]["low"], summary["ood_accuracy"]["high"]) == (
        pytest.approx((ood.mean, ood.low, ood.high)))
    assert summary["iid_accuracy"]["high"] == 1.0 and iid.high > 1.0  # the t interval is cut at the bound, as stated
    assert summary["iid_accuracy"]["low"] == pytest.approx(iid.low)
    assert summary["iid_accuracy"]["method"] == "t within [0, 1]" and summary["seconds"]["mean"] == 1.0
    (missing,) = lg.summarize_runs([row("a", "x", None, seed=0), row("a", "x", 0.5, seed=1)])
    assert missing["ood_accuracy"]["n"] == 1 and missing["ood_accuracy"]["n_nonfinite"] == 1  # counted, not dropped
    keyed = lg.summarize_runs([{**row("addition", "x", 0.1), "task_options": {"scratchpad": "icovr"}}])
    assert keyed[0]["task"] == "addition[scratchpad icovr]"  # grouped by the task as the tables name it


# ------------------------------------------------------------------------------------------- tasks
def test_every_registered_task_is_accepted():
    tasks = list_tasks()
    assert len(tasks) >= 22
    for name in tasks:
        assert lg.parse_task(name) == (name, {})


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
        main(["--quick", "--set", "run_tasks=[copy_repeet]"], name="length_generalization")
    assert "unknown task 'copy_repeet'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- presets
def config_of(name="quick", *overrides):
    return load_config(BENCHMARK, name, overrides=list(overrides))[0]


@pytest.mark.parametrize("name", ["quick", "full", "lr_search", "families", "gpu"])
def test_presets_load_and_name_only_registered_tasks_and_encoders(name):
    import pe_toolkit as pet

    assert set(BENCHMARK.preset_names()) == {"quick", "full", "lr_search", "families", "gpu"}
    config = config_of(name)
    for spec in BENCHMARK.runs(config):
        get_task(spec["task"], **{k: tuple(v) if isinstance(v, list) else v for k, v in spec["task_options"].items()})
        assert spec["encoding"] in pet.list_encoders()
    for task in config.tasks:  # every catalogue entry is a registered task with valid options
        entry = lg.task_entry(config, task)
        get_task(task, **{k: tuple(v) if isinstance(v, list) else v for k, v in entry["options"].items()})
    if name not in ("quick", "lr_search"):  # evidence presets (lr_search: its own test below)
        assert len(config.seeds) >= 3 and config.evaluation.per_length >= 100
    if name not in ("quick", "lr_search"):  # the presets with the whole task catalogue
        counting = lg.task_entry(config, "cope_counting")
        assert counting["early_stop"]["target_error"] == 0.05 and "music_relative" in counting["encoders"]
        regions = lg.task_entry(config, "contextual_counting")["options"]
        assert regions["test_regions"][0] > regions["train_regions"][1]  # more regions at test


def test_the_full_preset_runs_kazemnejads_comparison_on_a_deep_trunk():
    config = config_of("full")
    assert config.run_tasks == ["copy_random", "copy_repeat", "copy_replace", "copy_repeat_x2", "scan_length"]
    assert config.model.embedding_std == 1.0 and not config.model.tie_embeddings  # T5's embeddings, untied
    assert BENCHMARK.tuning(config) is None and set(config.lr_by_encoder) == set(config.encoders)  # lr_search's
    search = config_of("lr_search")
    tuning = BENCHMARK.tuning(search)  # the lr per encoder on copy_random, seed 0, by IID accuracy
    assert (tuning.param, tuning.group, tuning.trials_on, tuning.metric, tuning.maximize) == (
        "training.lr", "encoding", "task", "iid_accuracy", True)
    assert tuning.values[0] == search.training.lr and tuning.max_extensions >= 1  # the old lr wins ties
    assert BENCHMARK.tuning(config_of("gpu")) is None
    per_case = BENCHMARK.tuning(config_of("families"))  # its families run their own encoder lists: per case
    assert (per_case.group, per_case.trials_on, per_case.metric) == ("case", None, "iid_accuracy")
    assert config.encoders == ["nope", "t5", "alibi", "rope", "sinusoidal"] and len(config.seeds) == 3
    assert config.model.num_layers >= 4
    head = config.model.dim // config.model.num_heads
    assert int(head * lg.ENCODING_OPTIONS["rope"]["rotary_fraction"]) // 2 >= 4  # RoPE: several frequencies
    assert len(BENCHMARK.runs(config)) == 5 * 5 * 3
    families = config_of("families")
    assert set(families.run_tasks) == {"cope_counting", "contextual_counting", "selective_copy", "flip_flop"}
    assert lg.task_entry(families, "cope_counting")["early_stop"]["stop"] is False  # no truncated metric


@pytest.mark.parametrize("settings, message", [
    (["run_tasks=[copy_random, cope_counting]", "tasks.cope_counting={encoders: [cope]}"],
     "lr_tuning tunes every encoder on one task, but their first tasks.*or set lr_tuning.per: case"),
    (["lr_tuning.per=task"], "per"),
    (["tasks.copy_random.training={lr: 0.01}"], r"tasks \['copy_random'\] set their own training.lr"),
    (["lr_tuning.lrs=[0.002, 0.002]"], "lr_tuning.lrs"),
])
def test_lr_tuning_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        BENCHMARK.check(config_of("lr_search", *settings))


def test_lr_tuning_per_case_tunes_each_task_and_encoder_on_its_own():
    """Tuning per (task, architecture, encoder): the runner's group is the spec's case, no first task is shared."""
    config = config_of("families", "run_tasks=[cope_counting, selective_copy]")
    BENCHMARK.check(config)  # their encoder lists differ: per encoder refuses it (first tasks differ)
    with pytest.raises(ValueError, match="first tasks differ"):
        BENCHMARK.check(config_of("families", "run_tasks=[cope_counting, selective_copy]", "lr_tuning.per=encoder"))
    specs, tuning = BENCHMARK.runs(config), BENCHMARK.tuning(config)
    assert tuning.group == "case" and tuning.trials_on is None
    cases = {s["case"] for s in specs}
    assert len(cases) == len({(s["task"], s.get("architecture"), s["encoding"]) for s in specs}) == len(specs) // 3
    assert "tuned per case" in BENCHMARK.describe(SimpleNamespace(config=config, rows=[], device="cpu"))


def test_the_lr_search_trials_are_the_full_presets_copy_random_seed_0_runs():
    """The full preset fixes the lr_search preset's choices: that holds only if a trial is the full run at that lr."""
    full, search = config_of("full"), config_of("lr_search")
    trial = next(s for s in BENCHMARK.runs(search) if s["encoding"] == "rope")
    run = next(s for s in BENCHMARK.runs(full) if (s["task"], s["encoding"], s["seed"]) == ("copy_random", "rope", 0))
    assert trial == {**run, "training": {**run["training"], "lr": trial["training"]["lr"]}}
    assert run["training"]["lr"] == full.lr_by_encoder["rope"] and full.encoders == search.encoders


FIXED = "lr_by_encoder={nope: 0.001, t5: 0.008, alibi: 0.004, rope: 0.004, sinusoidal: 0.001}"


def test_fixed_learning_rates_per_encoder_reach_every_spec_of_that_encoder():
    config = config_of("lr_search", "lr_tuning=null", FIXED)
    BENCHMARK.check(config)
    assert BENCHMARK.tuning(config) is None
    lrs = {(s["encoding"], s["training"]["lr"]) for s in BENCHMARK.runs(config)}
    assert lrs == {("nope", 0.001), ("t5", 0.008), ("alibi", 0.004), ("rope", 0.004), ("sinusoidal", 0.001)}
    result = SimpleNamespace(config=config)
    assert "Learning rates fixed per encoder by `lr_by_encoder`" in BENCHMARK.fairness_notes(result)[0]
    subset = config_of("full", "encoders=[nope, rope]", FIXED)  # the table may hold more encoders than run
    BENCHMARK.check(subset)
    assert {(s["encoding"], s["training"]["lr"]) for s in BENCHMARK.runs(subset)} == {("nope", 0.001), ("rope", 0.004)}
    assert BENCHMARK.fixed(subset) == {"param": "training.lr", "group": "encoding",  # results.json: fixed, not tuned
                                       "values": {"nope": 0.001, "rope": 0.004}}
    assert BENCHMARK.fixed(config_of("lr_search")) is None
    untouched = BENCHMARK.runs(config_of("lr_search"))  # without it: the preset's lr (tuning replaces it)
    assert {s["training"]["lr"] for s in untouched} == {config.training.lr}


@pytest.mark.parametrize("settings, message", [
    ([FIXED], "lr_by_encoder fixes the learning rates that lr_tuning would choose"),
    (["lr_tuning=null", "lr_by_encoder={nope: 0.001}"], r"for every encoder that runs.*missing \['t5'.*has \['nope'\]"),
    (["lr_tuning=null", "lr_by_encoder={nope: 0.001, t5: 0.001, alibi: 0.001, rope: 0.001, sinusiodal: 0.001}"],
     r"missing \['sinusoidal'\]"),
    (["lr_tuning=null", FIXED, "tasks.copy_random.training={lr: 0.01}"],
     r"lr_by_encoder sets the learning rates, but tasks \['copy_random'\]"),
    (["lr_tuning=null", "lr_by_encoder={nope: -1}"], "lr_by_encoder"),
])
def test_lr_by_encoder_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        BENCHMARK.check(config_of("lr_search", *settings))


def test_the_gpu_preset_is_bigger_than_the_cpu_one():
    full, gpu = config_of("full"), config_of("gpu")
    assert gpu.model.dim * gpu.model.num_layers > full.model.dim * full.model.num_layers
    assert gpu.training.num_train > full.training.num_train and len(gpu.seeds) == len(full.seeds) == 3
    assert len(gpu.run_tasks) > len(full.run_tasks)  # every task family (the CPU presets split them)


def test_overrides_and_task_entries_reach_every_spec():
    config = config_of("full", "training.steps=7", "seeds=[4, 5]", "run_tasks=[reverse, cope_counting]",
                       "lr_by_encoder=null")  # the two tasks' encoders share no lr table
    specs = BENCHMARK.runs(config)
    copy = [s for s in specs if s["task"] == "reverse"]
    assert {s["training"]["steps"] for s in copy} == {7} and {s["seed"] for s in specs} == {4, 5}
    counting_steps = lg.task_entry(config, "cope_counting")["training"]["steps"]  # the task's own budget
    assert counting_steps != 7 and {s["training"]["steps"] for s in specs if s["task"] == "cope_counting"} == {
        counting_steps}
    assert len({(s["case"], s["seed"]) for s in specs}) == len(specs)  # the store keys are unique
    model = specs[0]["model"]  # the default trunk (T5's embeddings, untied) is unmarked; a changed one is marked
    assert (model["embedding_std"], model["tie_embeddings"], model["scale_embeddings"]) == (1.0, False, False)
    assert specs[0]["case"].count("__") == 1
    scaled = BENCHMARK.runs(config_of("quick", "model.scale_embeddings=true", "model.embedding_std=null",
                                      "model.dropout=0.1"))
    assert scaled[0]["case"] == "copy_repeat__nope__scaledemb" and scaled[0]["model"]["dropout"] == 0.1
    gpt2 = BENCHMARK.runs(config_of("quick", "model.embedding_std=null", "model.tie_embeddings=true"))[0]
    assert gpt2["case"] == "copy_repeat__nope__gpt2emb__tied"
    assert BENCHMARK.runs(config_of("quick", "model.embedding_std=0.5"))[0]["case"] == "copy_repeat__nope__emb0.5"


def test_the_trunk_options_reach_the_modules_transformers():
    from pe_toolkit.training import EncoderDecoderModule, SequenceLMModule

    decoder = SequenceLMModule(10, dim=16, num_heads=2, num_layers=1, embedding_std=1.0, tie_embeddings=False)
    assert decoder.model.config.embedding_std == 1.0 and decoder.model.lm_head.weight is not (
        decoder.model.token_embedding.weight)
    encdec = EncoderDecoderModule(10, dim=16, num_heads=2, embedding_std=0.5)
    assert encdec.decoder.config.embedding_std == 0.5 and encdec.decoder.config.tie_embeddings


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.stepz=3", "'training.stepz' does not exist"),
        ("run_tasks=[copy_repeet]", "unknown task 'copy_repeet'"),
        ("encoders=[nope, ropez]", r"encoders must be a non-empty list of distinct values from \['"),
        ("tasks.cope_counting.encoders=[cope, copez]", "tasks.cope_counting.encoders must be a non-empty list"),
        ("model.dropout=1.0", '(?s)key "config.model.dropout".*1.0 does not conform to restriction v>=0.0 and v<1.0'),
        ("seeds=[1, 1]", r"seeds must be a non-empty list of distinct values, got \[1, 1\]"),
        ("seeds=[-1]", '(?s)key "config.seeds".*-1 does not conform to restriction v>=0'),
        ("run_tasks=[]", r"run_tasks must be a non-empty list of distinct values, got \[\]"),
        ("training.steps=0", '(?s)key "config.training.steps".*0 does not conform to restriction v>0'),
        ("tasks.copy_repeat.training.stepz=3", "Unexpected keys: {'stepz'}"),
        ("tasks.copy_repeat.training.steps=0", "0 does not conform to restriction v>0"),
        ("tasks.copy_repeat.early_stop={target_error: 0, every_n_steps: 1, num_val: 1}",
         "0 does not conform to restriction v>0 and v<1"),
        ("tasks.copy_repeat.architectures=[rnn]", "(?s)Expected a typing.Literal.*Got value: rnn"),
        ("tasks.copy_repeat.colour=red", "'tasks.copy_repeat.colour' does not exist"),
    ],
)
def test_bad_config_values_name_their_key(override, message):
    with pytest.raises(ValueError, match=message) as error:
        config_of("quick", override)
    assert override.split("=")[0].split(".")[0] in str(error.value)  # the key is named


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
    entry = lg.task_entry(config_of("full"), task)
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
    for key in ("loss_history", "final_train_loss", "per_length_iid", "per_length_ood", "encoding_options"):
        assert first[key] == second[key], key
    other = lg.run_one({**spec, "seed": 1})
    assert other["loss_history"] != first["loss_history"]  # the seed matters: the comparison can fail


def test_density_shift_tasks_test_the_other_split_at_the_same_lengths():
    spec = {**tiny_spec("nope", steps=2), "task": "flip_flop",
            "task_options": {"train_lengths": [4, 5], "test_lengths": [4, 5], "test_p_ignore": 0.98}}
    result = lg.run_one(spec)
    assert set(result["per_length_iid"]) == set(result["per_length_ood"]) == {4, 5}


def test_early_stop_records_the_validation_curve_and_stops_below_the_target(monkeypatch):
    spec = tiny_spec("nope", steps=6, early_stop={"target_error": 1e-9, "every_n_steps": 2, "num_val": 8})
    result = lg.run_one(spec)  # an unreachable target: the whole budget, a validation every 2 steps
    assert [s for s, _ in result["validation_curve"]] == [2, 4, 6] and result["target_reached"] is None
    assert result["steps_done"] == 6

    class Solved(callbacks.ValidationErrorCurve):  # every validation answer right: the target is met at once
        def on_validation_end(self, trainer, pl_module):
            super().on_validation_end(trainer, SimpleNamespace(val_results={1: (8, 8)}))

    monkeypatch.setattr(callbacks, "ValidationErrorCurve", Solved)
    stopped = lg.run_one({**spec, "early_stop": {"target_error": 0.05, "every_n_steps": 2, "num_val": 8}})
    assert stopped["steps_done"] == 2 and stopped["target_reached"] == 2 and stopped["validation_curve"] == [[2, 0.0]]
    recorded = lg.run_one({**spec, "early_stop": {"target_error": 0.05, "every_n_steps": 2, "num_val": 8,
                                                  "stop": False}})
    assert recorded["steps_done"] == 6 and recorded["target_reached"] == 2  # the families preset: record only


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
    spec = tiny_spec("cope", steps=1, encoding_options={"npos_max": lg.CONTEXT})
    result = lg.run_one(spec)
    assert result["encoding_options"] == {"npos_max": context}
    assert spec["encoding_options"] == {"npos_max": "context"}  # the stored spec keeps the rule, not the value
    assert result["parameters"] - result["parameters_without_pe"] == context * 8  # one table, head_dim 8
    options = lg.ENCODING_OPTIONS["music_relative"]
    relative = lg.run_one(tiny_spec("music_relative", steps=1, encoding_options=options))
    assert relative["encoding_options"] == {"max_distance": context, "share_heads": True}
    assert relative["parameters"] - relative["parameters_without_pe"] == (2 * context + 1) * 8
    fixed = lg.run_one(tiny_spec("cope", steps=1, encoding_options={"npos_max": 16}))
    assert fixed["encoding_options"] == {"npos_max": 16}  # a number is kept as it is


# ------------------------------------------------------------------------------------------- claims
def rows_of(task, enc, ood_values, iid=1.0):
    iids = iid if isinstance(iid, list) else [iid] * len(ood_values)
    return [row(task, enc, v, seed=i, iid=iids[i]) for i, v in enumerate(ood_values)]


def copy_claim(rows, a="nope", b="rope"):
    (claim,) = [r for r in lg.claims(rows) if r["task"] == "copy_repeat" and r["encoder_a"] == a
                and r["encoder_b"] == b]
    return claim


def test_claim_verdicts_come_from_the_difference():
    high, low = [0.8, 0.82, 0.81], [0, 0, 0.01]
    separated = rows_of("copy_repeat", "nope", high) + rows_of("copy_repeat", "rope", low)
    results = {(r["encoder_a"], r["encoder_b"]): r for r in lg.claims(separated) if r["task"] == "copy_repeat"}
    claim = results[("nope", "rope")]
    assert claim["verdict"] == "reproduced" and claim["kind"] == "claim" and claim["claim_kind"] == "difference"
    assert claim["a"]["n"] == claim["b"]["n"] == 3 and claim["test"].startswith("Welch t")
    assert claim["difference"]["mean"] == pytest.approx(0.81 - 0.01 / 3)
    missing = results[("t5", "rope")]
    assert missing["verdict"] == "untested" and "no runs of ['t5']" in missing["reason"]
    # overlapping per-side intervals, yet the difference is detected: never "not reproduced" from an overlap
    overlapping = rows_of("copy_repeat", "nope", [0.6, 0.7, 0.8]) + rows_of("copy_repeat", "rope", [0.3, 0.4, 0.5])
    claim = copy_claim(overlapping)
    assert claim["a"]["low"] < claim["b"]["high"] and claim["verdict"] == "reproduced"
    wide = rows_of("copy_repeat", "nope", [0.1, 0.9, 0.5]) + rows_of("copy_repeat", "rope", [0, 0.3, 0])
    assert copy_claim(wide)["verdict"] == "inconclusive" and copy_claim(wide)["min_detectable_effect"] > 0
    reversed_ = rows_of("copy_repeat", "nope", low) + rows_of("copy_repeat", "rope", high)
    claim = copy_claim(reversed_)
    assert claim["verdict"] == "contradicted"
    table = claims_table([claim])
    assert "**contradicted**" in table and "(n=3)" in table and "-0.807 [" in table


def test_claims_untested_with_one_seed_or_a_task_not_learned():
    one_seed = rows_of("copy_repeat", "nope", [0.9]) + rows_of("copy_repeat", "rope", [0.0])
    claim = copy_claim(one_seed)
    assert claim["verdict"] == "untested" and "fewer than 2 replicates" in claim["reason"]
    unlearned = rows_of("copy_repeat", "nope", [0.8, 0.82, 0.81]) + rows_of("copy_repeat", "rope", [0, 0, 0.01],
                                                                              iid=[0.95, 0.9, 0.6])
    claim = copy_claim(unlearned)
    assert claim["verdict"] == "untested" and claim["iid_b"] == pytest.approx(0.8166, abs=1e-4)
    assert "not learned in distribution by ['rope']" in claim["reason"] and "0.9" in claim["reason"]
    learned = rows_of("copy_repeat", "nope", [0.8, 0.82, 0.81]) + rows_of("copy_repeat", "rope", [0, 0, 0.01],
                                                                            iid=[0.95, 0.9, 0.85])
    assert copy_claim(learned)["verdict"] == "reproduced"  # the seed mean 0.9 meets the threshold


def test_out_of_distribution_claims_of_every_paper_need_the_task_learned_in_distribution():
    """Golkar's contextual counting and CoPE's selective copy / flip-flop compare OOD accuracy: a pair that
    did not learn the task in distribution is untested, not a tie (counting's claim is on the IID error)."""
    causal, bidirectional = "contextual_counting (encdec_causal)", "contextual_counting (encdec_bidirectional)"

    def rows_for(task, arch, enc, values, iid):
        return [{**r, "task": task, "architecture": arch} for r in rows_of(task, enc, values, iid)]

    rows = (rows_for("contextual_counting", "encdec_causal", "nope", [0.0, 0.01, 0.0], 0.1)
            + rows_for("contextual_counting", "encdec_bidirectional", "nope", [0.0, 0.0, 0.0], 0.1)
            + rows_of("flip_flop", "cope", [0.6, 0.62, 0.61], iid=0.95)
            + rows_of("flip_flop", "rope", [0.2, 0.21, 0.2], iid=0.95))
    results = lg.claims(rows)
    (golkar,) = [r for r in results
                 if r["task"] == causal and "bidirectional" in r["name"] and r["encoder_a"] == "nope"]
    assert golkar["verdict"] == "untested" and "not learned in distribution" in golkar["reason"]
    assert f"['nope on {causal}', 'nope on {bidirectional}']" in golkar["reason"]  # the two sides, told apart
    assert bidirectional == lg.task_key(rows[3])
    (flip,) = [r for r in results if r["task"] == "flip_flop" and r["encoder_b"] == "rope"]
    assert flip["verdict"] == "reproduced"


def test_only_the_papers_whose_tasks_ran_are_decided():
    copy = rows_of("copy_repeat", "nope", [0.8, 0.82, 0.81]) + rows_of("copy_repeat", "rope", [0, 0, 0.01])
    papers = {c["paper"] for c in lg.claims(copy)}
    assert papers == {"Kazemnejad et al. 2023"}  # reverse_x2's claims stay (untested), counting's are not listed
    assert any(c["task"] == "reverse_x2" and "no runs of" in c["reason"] for c in lg.claims(copy))
    flip = rows_of("flip_flop", "cope", [0.6, 0.62, 0.61], iid=0.95) + rows_of("flip_flop", "rope", [0.2] * 3)
    assert {c["paper"] for c in lg.claims(flip)} == {"Golovneva et al. 2024 (Tables 1-2; numbers not transcribed)"}
    assert lg.claims([]) == []
    assert lg.main_comparison_section(lg.summarize_runs(flip), lg.claims(flip)) == ""  # no copy-family task ran
    section = lg.main_comparison_section(lg.summarize_runs(copy), lg.claims(copy))
    assert section.startswith("\n## Kazemnejad et al. 2023's main comparison") and "| copy_repeat |" in section


def test_reverse_is_compared_only_with_the_papers_reverse_x2_and_counting_by_its_error():
    tasks = {c["task"] for c in lg.claim_list()}
    assert "reverse_x2" in tasks and "reverse" not in tasks
    counting = (rows_of("cope_counting", "cope", [0.5] * 3, iid=[0.99, 0.98, 0.985])
                + rows_of("cope_counting", "music_relative", [0.5] * 3, iid=[0.80, 0.82, 0.81]))
    (claim,) = [r for r in lg.claims(counting) if r["task"] == "cope_counting" and r["encoder_b"] == "music_relative"]
    assert claim["verdict"] == "reproduced" and claim["a"]["mean"] == pytest.approx(1 - 0.985)
    assert claim["higher_is_better"] is False


# ------------------------------------------------------------------------------------------- end to end
def test_a_tiny_run_writes_intervals_and_a_resumed_rerun_reuses_every_run(tmp_path, monkeypatch):
    argv = ["--quick", "--jobs", "1", "--set", "encoders=[nope]", "--set", "seeds=[0, 1]",
            "--set", "training.steps=3", "--set", "training.num_train=64", "--set", "evaluation.per_length=2",
            "--set", "tasks.copy_repeat.options.test_lengths=[9,10]", "--accelerator", "cpu", "--out", str(tmp_path)]
    assert main(argv, name="length_generalization") == 0
    out = tmp_path / "length_generalization"
    report = (out / "report.md").read_text()
    assert "| copy_repeat | nope | 2 |" in report and "(n=2)" in report and "## Claims" in report
    assert "## Kazemnejad et al. 2023's main comparison" in report  # a copy-family task ran
    assert "Golkar" not in report and "Golovneva" not in report  # none of their tasks ran: not listed
    assert "trunk parameters without the PE: copy_repeat " in report  # the trunk's size per task, not one row's
    document = json.loads((out / "results.json").read_text())
    runs = [r for r in document["rows"] if r["kind"] == "run"]
    assert [(r["encoding"], r["seed"]) for r in runs] == [("nope", 0), ("nope", 1)]
    claims = [r for r in document["rows"] if r["kind"] == "claim"]
    assert claims and all(r["verdict"] in ("reproduced", "contradicted", "inconclusive", "untested") for r in claims)
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 2
    assert (out / "accuracy_vs_length.png").exists()

    def no_training(spec):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(lg.LengthGeneralization, "run_one", staticmethod(no_training))
    assert main([*argv, "--resume"], name="length_generalization") == 0
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert again == runs


def test_main_comparison_puts_ours_beside_the_papers_and_counts_the_verdicts():
    rows = rows_of("copy_repeat", "nope", [0.8, 0.82, 0.81]) + rows_of("copy_repeat", "rope", [0, 0, 0.01])
    rows += rows_of("copy_repeat", "t5", [0.5, 0.6, 0.7], iid=0.5)  # not learned: its claims are untested
    summary = lg.summarize_runs(rows)
    claim_rows = lg.claims(rows)
    table = lg.main_comparison(summary, claim_rows)
    lines = table.splitlines()
    assert lines[0].startswith("| task | nope: ours [95 %] / paper | t5: ours [95 %] / paper |")
    copy = next(line for line in lines if line.startswith("| copy_repeat |"))
    nope = summarize([0.8, 0.82, 0.81], bounds=(0.0, 1.0))
    assert f"| {nope.mean:.2f} [{nope.low:.2f}, {nope.high:.2f}] / 0.99 (IID 1.00) |" in copy
    assert "| - / 0.29 |" in copy  # alibi: no runs
    verdicts = [c["verdict"] for c in claim_rows if c["task"] == "copy_repeat"]
    assert verdicts.count("reproduced") == 1 and verdicts.count("untested") == 8  # nope above rope only
    assert copy.endswith("| 1 reproduced, 8 untested |")
    # every Kazemnejad task with claims has a row, run or not; pcfg (no pair 0.1 apart) has none
    assert [line.split(" | ")[0][2:] for line in lines[2:]] == [
        "copy_repeat", "copy_replace", "copy_random", "copy_repeat_x2", "reverse_x2", "scan_length",
        "addition[scratchpad icovr]"]
    replace = next(line for line in lines if line.startswith("| copy_replace |"))
    assert replace.endswith("| 8 untested |") and "| - / 0.97 |" in replace
