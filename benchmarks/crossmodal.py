"""CMC-PE vs cross-attention vs no conditioning for joint audio-video diffusion (Ishii et al. 2024, arXiv:2409.17550).

Trains the joint denoiser (:class:`pe_toolkit.domains.crossmodal.models.JointDenoiser`: a video-frame and an
audio-spectrogram Transformer denoiser) on the seeded bouncing-ball clips
(:func:`pe_toolkit.domains.crossmodal.generate_clips`) with four connectors:

* ``none``: the two denoisers are independent (no cross-modal information): the control;
* ``cross_attention``: cross-attention to the other modality's per-time-step features, no time on the keys
  (CoDi-style, the paper's baseline);
* ``cross_attention_rope``: the same with RoPE on query and (rescaled) key times, a stronger baseline that
  can align by time;
* ``cmc_pe``: CMC-PE, the other modality's features interpolated onto this time axis and added as a PE.

Each trained model samples clips jointly (DDIM) with and without the timestep adjustment
(``gamma = 1``: none; ``gamma = 1.5``: the paper's default), and the clips are scored with AV-Align (audio
onsets vs video motion peaks within +-1 frame, :mod:`pe_toolkit.domains.crossmodal.alignment`).

**Chance floor.** AV-Align rewards events that happen to coincide, so a model that draws many onsets and
motion peaks scores well above zero without aligning anything (the issue measured 0.18-0.23 for every trained
variant, the level of a jittered noisy video). Each model is therefore scored twice on its own samples: as
drawn, and with every clip's audio paired with the next clip's video (:func:`chance_floor`). The second number
has the same event counts and no alignment; ``gain = AV-Align - floor`` is the alignment the model learned.
The ``none`` connector cannot align (its modalities never meet), so its gain is the check that the floor is
right.

Fairness rule (``docs/benchmarks.md``): every connector trains on the same clips for the same steps with the
same learning rate and model size (no connector is tuned; the tuning budget is zero for all); nothing from the
evaluation clips reaches a model (samples are drawn from noise); every number is a mean over >= 3 seeds with its
Student-t 95 % interval and every verdict comes from :func:`common.interval_verdict`. A comparison between
connectors is *untested* unless at least one of the two aligns beyond its chance floor.

    python benchmarks/crossmodal.py --quick                  # pipeline check, < 2 minutes
    python benchmarks/crossmodal.py --jobs 2                 # the full CPU preset
    python benchmarks/crossmodal.py --preset gpu --accelerator cuda --jobs 4
    python benchmarks/crossmodal.py --set training.steps=2000 --set seeds=[0,1,2]
    python benchmarks/crossmodal.py --resume                 # reuse the finished runs of an interrupted one

Presets: ``benchmarks/presets/crossmodal/{quick,full,gpu}.yaml``. Outputs in ``<out>/crossmodal/``:
``results.json``, ``report.md``, ``av_align.png``, ``samples.png``, and every finished run in
``runs/<preset>/`` (its rows, its two drawn clips and its configuration).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    RunStore,
    format_interval,
    interval_verdict,
    markdown_table,
    mean_interval,
    nan_if_missing,
    note_if_empty,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import check_seeds, device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "crossmodal"
VARIANTS: dict[str, dict[str, Any]] = {
    "none": {"connector": "none"},
    "cross_attention": {"connector": "cross_attention", "connector_options": {"time_encoding": "none"}},
    "cmc_pe": {"connector": "cmc_pe"},
    "cross_attention_rope": {"connector": "cross_attention", "connector_options": {"time_encoding": "rope"}},
}
METRICS = ("av_align", "floor", "gain", "audio_events", "video_events", "silent_clips", "val_loss")
PAPER_GAMMA = 1.5  # the timestep adjustment of the paper's CLI default


# ------------------------------------------------------------------------------------------ preset
def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_preset(preset: dict[str, Any]) -> None:
    """``ValueError`` naming the preset key for a preset that cannot run."""
    check_seeds(preset["seeds"])
    variants = preset["variants"]
    if not isinstance(variants, list) or not variants or not set(variants) <= set(VARIANTS) \
            or len(set(variants)) != len(variants):
        raise ValueError(f"variants must be a non-empty list of distinct names from {list(VARIANTS)}, "
                         f"got {variants!r}")
    for group, keys in (("data", ("train_clips", "eval_clips")), ("model", ("dim", "num_heads", "num_layers",
                                                                         "num_steps")),
                        ("training", ("steps", "batch_size")), ("sampling", ("sampling_steps",))):
        for key in keys:
            if not _positive_int(preset[group][key]):
                raise ValueError(f"{group}.{key} must be a positive int, got {preset[group][key]!r}")
    if preset["data"]["eval_clips"] < 2:
        raise ValueError(f"data.eval_clips must be >= 2 (the chance floor pairs each clip's audio with another "
                         f"clip's video), got {preset['data']['eval_clips']}")
    lr = preset["training"]["lr"]
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"training.lr must be a positive number, got {lr!r}")
    gammas = preset["sampling"]["gammas"]
    if not isinstance(gammas, list) or not gammas or not all(
            isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and g > 0 for g in gammas):
        raise ValueError(f"sampling.gammas must be a non-empty list of positive numbers, got {gammas!r}")


def make_data(preset: dict[str, Any]):
    """The training clips (seed 0) and the held-out clips (seed 1) every connector and seed shares."""
    from pe_toolkit.domains.crossmodal import generate_clips

    train = generate_clips(preset["data"]["train_clips"], seed=0)
    val = generate_clips(max(preset["data"]["eval_clips"], 64), seed=1)
    return train, val


def run_spec(preset: dict[str, Any]) -> dict[str, Any]:
    """What one run depends on (its identity in the RunStore)."""
    return {k: preset[k] for k in ("data", "model", "training", "sampling", "device")}


# ------------------------------------------------------------------------------------------ scoring
def chance_floor(video, audio) -> dict[str, float]:
    """AV-Align of the same clips re-paired: clip ``i``'s audio with clip ``i + 1``'s video (cyclically).

    Event counts stay those of the model's own samples, and no pair shares a time line, so this is the score
    of the model's event statistics without any alignment.

    Example:
        >>> import torch
        >>> from pe_toolkit.domains.crossmodal import generate_clips
        >>> clips = generate_clips(16, seed=1)
        >>> chance_floor(clips.video, clips.audio)["av_align"] < 0.5
        True
    """
    import torch

    from pe_toolkit.domains.crossmodal.alignment import av_align_batch

    if video.shape[0] < 2:
        raise ValueError(f"chance_floor: needs >= 2 clips to re-pair, got {video.shape[0]}")
    return av_align_batch(torch.roll(video, 1, dims=0), audio)


def reference_levels(val) -> dict[str, float]:
    """AV-Align of held-out real clips as drawn (the ceiling) and re-paired (their chance floor)."""
    from pe_toolkit.domains.crossmodal.alignment import av_align_batch

    real = av_align_batch(val.video, val.audio)
    return {"real": real["av_align"], "shuffled": chance_floor(val.video, val.audio)["av_align"],
            "real_audio_events": real["audio_events"], "real_video_events": real["video_events"]}


def run_one(variant: str, seed: int, preset: dict[str, Any], runs_dir: str, resume: bool, threads: int,
            data=None) -> dict[str, Any]:
    """Train one joint model (or load its stored result); one row per gamma and two drawn clips."""
    import torch

    torch.set_num_threads(threads)
    store = RunStore(runs_dir, resume=resume)
    key, spec = f"{variant}__seed{seed}", run_spec(preset)
    stored = store.load(key, spec)
    if stored is not None:
        return {"rows": stored["rows"], "clip": stored["clip"], "reused": True}
    import lightning as L

    from pe_toolkit.domains.crossmodal.alignment import av_align_batch
    from pe_toolkit.domains.crossmodal.lightning_module import AVDataModule, JointDiffusionModule

    train, val = data if data is not None else make_data(preset)
    model, training, sampling = preset["model"], preset["training"], preset["sampling"]
    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    module = JointDiffusionModule(
        tuple(train.video.shape[1:]), tuple(train.audio.shape[1:]), dim=model["dim"], num_heads=model["num_heads"],
        num_layers=model["num_layers"], num_steps=model["num_steps"], lr=training["lr"], max_steps=training["steps"],
        warmup_steps=max(1, training["steps"] // 20), **VARIANTS[variant])
    trainer = L.Trainer(max_steps=training["steps"], **trainer_options(preset["device"]), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, check_val_every_n_epoch=10**6)
    datamodule = AVDataModule(train, val, batch_size=training["batch_size"], seed=seed)
    trainer.fit(module, datamodule)
    train_seconds = time.perf_counter() - start
    val_loss = trainer.validate(module, datamodule, verbose=False)[0]["val/loss"]
    module = module.cpu()
    rows, clip = [], None
    for gamma in sampling["gammas"]:
        t0 = time.perf_counter()
        video, audio = module.sample(preset["data"]["eval_clips"], sampling_steps=sampling["sampling_steps"],
                                     gamma=gamma, seed=10_000 + seed)
        scores, floor = av_align_batch(video, audio), chance_floor(video, audio)
        if clip is None:
            clip = [video[:2].tolist(), audio[:2].tolist()]
        rows.append({"variant": variant, "gamma": gamma, "seed": seed, **scores, "floor": floor["av_align"],
                     "gain": scores["av_align"] - floor["av_align"], "val_loss": float(val_loss),
                     "train_seconds": train_seconds, "sample_seconds": time.perf_counter() - t0,
                     "parameters": sum(p.numel() for p in module.model.parameters())})
    store.save(key, spec, {"rows": rows, "clip": clip})
    return {"rows": rows, "clip": clip, "reused": False}


# ------------------------------------------------------------------------------------------ summary
def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (variant, gamma): the mean and 95 % interval over seeds of every metric (``<metric>_ci``, ``_pm``)."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["variant"], row["gamma"]), []).append(row)
    out = []
    for (variant, gamma), members in groups.items():
        entry: dict[str, Any] = {"variant": variant, "gamma": gamma, "seeds": len(members)}
        for key in METRICS:
            summary = mean_interval([nan_if_missing(m.get(key)) for m in members])
            entry[key] = summary["mean"] if summary["n"] else math.nan
            entry[f"{key}_ci"] = summary
            entry[f"{key}_pm"] = format_interval(summary, ".2f" if key.endswith("events") else ".3f")
        out.append(entry)
    return out


def beats_floor(entry: dict[str, Any]) -> bool:
    """The whole 95 % interval of ``gain`` lies above zero (needs >= 2 seeds)."""
    ci = entry["gain_ci"]
    return ci["n"] >= 2 and math.isfinite(ci["low"]) and ci["low"] > 0


def claims(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's findings, each *reproduced*, *not reproduced* or *untested*, from the intervals.

    * every connector aligns beyond its chance floor (gain > 0); the ``none`` control should not;
    * CMC-PE aligns better than cross-attention (gain, at the paper's gamma), and than the extra baseline
      cross-attention with RoPE; each untested unless one of the two aligns beyond its floor;
    * the timestep adjustment (gamma 1.5) improves CMC-PE's alignment over gamma 1; untested unless CMC-PE
      aligns beyond its floor at one of them.
    """
    by = {(s["variant"], s["gamma"]): s for s in summary}
    out: list[dict[str, Any]] = []
    for (variant, gamma), entry in by.items():
        above = beats_floor(entry)
        if entry["gain_ci"]["n"] < 2:
            verdict = "untested"
        elif variant == "none":
            verdict = "not reproduced" if above else "reproduced"
        else:
            verdict = "reproduced" if above else "not reproduced"
        claim = ("the control does not align (gain interval not above 0)" if variant == "none"
                 else "aligns beyond its chance floor (gain > 0)")
        out.append({"claim": f"{variant} (gamma {gamma:g}) {claim}", "a": entry["av_align_pm"],
                    "b": entry["floor_pm"], "gain": entry["gain_pm"], "verdict": verdict})

    def compare(a_key, b_key, text: str) -> None:
        a, b = by.get(a_key), by.get(b_key)
        if a is None or b is None:
            return
        if not (beats_floor(a) or beats_floor(b)):
            verdict = "untested (neither aligns beyond its chance floor)"
        else:
            verdict = {"better": "reproduced", "worse": "not reproduced (reversed)",
                       "tie": "not reproduced (tie)"}[interval_verdict(a["gain_ci"], b["gain_ci"],
                                                                       higher_is_better=True)]
        out.append({"claim": text, "a": a["gain_pm"], "b": b["gain_pm"], "gain": "", "verdict": verdict})

    gammas = sorted({g for _, g in by})
    paper_gamma = PAPER_GAMMA if PAPER_GAMMA in gammas else gammas[-1]
    compare(("cmc_pe", paper_gamma), ("cross_attention", paper_gamma),
            f"CMC-PE aligns better than cross-attention (gain, gamma {paper_gamma:g})")
    # not the paper's baseline: cross-attention whose queries and keys carry RoPE over their own time axes
    compare(("cmc_pe", paper_gamma), ("cross_attention_rope", paper_gamma),
            f"CMC-PE aligns better than cross-attention with RoPE (an extra baseline; gain, gamma {paper_gamma:g})")
    if 1.0 in gammas and paper_gamma != 1.0:
        compare(("cmc_pe", paper_gamma), ("cmc_pe", 1.0),
                f"the timestep adjustment (gamma {paper_gamma:g}) improves CMC-PE over gamma 1 (gain)")
    return out


# ------------------------------------------------------------------------------------------ plots
def plot_scores(summary: list[dict[str, Any]], references: dict[str, float], path: Path) -> None:
    """Bars of AV-Align per variant and gamma (95 % intervals where there are any), each model's chance floor as a
    black tick, and the real-clip levels as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in summary))
    gammas = list(dict.fromkeys(r["gamma"] for r in summary))
    width = 0.8 / len(gammas)
    fig, ax = plt.subplots(figsize=(2 * len(variants) + 2, 3.5))
    for j, gamma in enumerate(gammas):
        xs = [i + (j - (len(gammas) - 1) / 2) * width for i in range(len(variants))]
        entries = [next((r for r in summary if r["variant"] == v and r["gamma"] == gamma), {}) for v in variants]
        ys = [nan_if_missing(e.get("av_align")) for e in entries]
        errors = [[0.0] * len(ys), [0.0] * len(ys)]
        for i, e in enumerate(entries):
            ci = e.get("av_align_ci")
            if ci and math.isfinite(ci.get("low", math.nan)):
                errors[0][i], errors[1][i] = ys[i] - ci["low"], ci["high"] - ys[i]
        ax.bar(xs, ys, width, yerr=errors, capsize=3, label=f"gamma = {gamma:g}")
        floors = [nan_if_missing(e.get("floor")) for e in entries]
        ax.scatter(xs, floors, marker="_", s=300, color="black", zorder=3,
                   label="its chance floor (re-paired samples)" if j == 0 else None)
    note_if_empty(ax, "AV-Align of the sampled clips")
    ax.axhline(references["real"], color="green", linestyle="--", linewidth=1, label="real clips")
    ax.axhline(references["shuffled"], color="grey", linestyle=":", linewidth=1, label="real clips re-paired")
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, fontsize=8)
    ax.set_ylabel("AV-Align of sampled clips")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_samples(samples: dict[str, Any], path: Path) -> None:
    """Per variant: one sampled clip's video frames over time (a strip) and its spectrogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(samples), 2, figsize=(12, 1.6 * len(samples)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    for row, (variant, (video, audio)) in enumerate(samples.items()):
        frames = video[0]
        strip = frames.permute(1, 0, 2).reshape(frames.shape[1], -1)  # (H, T_v * W)
        axes[row, 0].imshow(strip.numpy(), cmap="gray", vmin=-1, vmax=1, aspect="auto")
        axes[row, 0].set_ylabel(variant, fontsize=7)
        axes[row, 1].imshow(audio[0].T.numpy(), origin="lower", aspect="auto", vmin=-1, vmax=1)
        for ax in axes[row]:
            note_if_empty(ax, "the sampled clip")
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_title("video frames over time")
    axes[0, 1].set_title("spectrogram")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ report
def why_not_note(summary: list[dict[str, Any]], references: dict[str, float]) -> str:
    """What the numbers say when no connector aligns beyond its floor (event counts against real clips)."""
    connected = [s for s in summary if s["variant"] != "none"]
    if not connected or any(beats_floor(s) for s in connected):
        return ""
    audio = [s["audio_events"] for s in connected if math.isfinite(s["audio_events"])]
    video = [s["video_events"] for s in connected if math.isfinite(s["video_events"])]
    counts = (f"The connected models draw {min(audio):.2f}-{max(audio):.2f} audio onsets and "
              f"{min(video):.2f}-{max(video):.2f} video motion peaks per clip, against "
              f"{references['real_audio_events']:.2f} and {references['real_video_events']:.2f} in real clips. "
              if audio and video else "")
    return ("**No connector aligns beyond its chance floor at this size and budget.** Each model's AV-Align is what "
            "its own samples score when re-paired with another clip's video, so the scores measure how many events "
            "the samples contain, not where they are. " + counts +
            "The comparison of connectors therefore carries no information here, and its claims are untested.\n\n")


def write_all(rows: list[dict[str, Any]], samples: dict[str, Any], total_runs: int, references: dict[str, float],
              shapes: tuple[tuple[int, ...], tuple[int, ...]], preset: dict[str, Any], root: Path, seconds: float,
              jobs: int) -> Path:
    """Write results.json, report.md and the plots for the models finished so far (called after every model)."""
    summary = summarize(rows)
    verdicts = claims(summary)
    finished = len({(r["variant"], r["seed"]) for r in rows})
    stored_summary = [{k: v for k, v in s.items() if not k.endswith("_pm")} for s in summary]
    out_dir = write_results(NAME, {**preset, "references": references, "models_finished": finished,
                                   "models_planned": total_runs, "jobs": jobs},
                            [{**r, "kind": "run"} for r in rows] + [{**s, "kind": "summary"} for s in stored_summary]
                            + [{**v, "kind": "verdict"} for v in verdicts], seconds, root=root).parent
    plot_scores(summary, references, out_dir / "av_align.png")
    plot_samples(samples, out_dir / "samples.png")
    partial = "" if finished == total_runs else f" **Partial: {finished} of {total_runs} models finished.**"
    data, model, training, sampling = preset["data"], preset["model"], preset["training"], preset["sampling"]
    body = [
        f"Preset `{preset['preset']}`. Bouncing-ball clips: video {shapes[0]} (T_v, H, W), audio spectrogram "
        f"{shapes[1]} (T_a, F); {data['train_clips']} training clips. Joint denoiser dim {model['dim']}, "
        f"{model['num_layers']} block(s) + connector per modality, T = {model['num_steps']} diffusion steps, "
        f"{training['steps']} training steps of batch {training['batch_size']} at lr {training['lr']}; "
        f"{data['eval_clips']} clips sampled per model and gamma with {sampling['sampling_steps']} DDIM steps. "
        f"Seeds {preset['seeds']}; device {preset['device']}; {seconds:.0f} s." + partial,
        "",
        f"Reference levels on held-out real clips: AV-Align {references['real']:.3f} as drawn, "
        f"{references['shuffled']:.3f} re-paired (audio of the next clip); "
        f"{references['real_audio_events']:.2f} audio onsets and {references['real_video_events']:.2f} video "
        "motion peaks per clip.",
        "",
        "## How the fairness rule is met",
        "",
        "* Same budget: every connector trains on the same clips, for the same steps, at the same learning rate "
        "and model width; no connector is tuned (a tuning budget of zero for all).",
        "* Nothing from the evaluation clips reaches a model: clips are sampled from noise; real clips only set "
        "the reference lines.",
        f"* {len(preset['seeds'])} seeds (initialisation, data order, diffusion noise and sampling noise): mean and "
        "Student-t 95 % interval; verdicts from `interval_verdict`.",
        "* Each model's chance floor is its own samples re-paired (clip i's audio with clip i+1's video): the same "
        "event counts without alignment. A connector comparison is untested unless one side aligns beyond it.",
        "",
        why_not_note(summary, references) + "## AV-Align of jointly sampled clips (mean [95 % interval])",
        "",
        markdown_table(summary, ["variant", "gamma", "seeds", ("av_align_pm", "AV-Align"),
                                 ("floor_pm", "chance floor"), ("gain_pm", "gain"),
                                 ("audio_events_pm", "audio onsets / clip"), ("video_events_pm", "video peaks / clip"),
                                 ("silent_clips_pm", "clips without events"), ("val_loss_pm", "val loss")],
                       {"gamma": "g"}),
        "",
        "Clips without any event are left out of a mean (AV-Align is undefined there) and counted in their own "
        "column. The paper's claims are CMC-PE > cross-attention on alignment, and gamma = 1.5 >= gamma = 1.",
        "",
        "## Verdicts",
        "",
        markdown_table(verdicts, ["claim", "a", "b", "gain", "verdict"]),
        "",
        "## Runs",
        "",
        markdown_table(rows, ["variant", "gamma", "seed", ("av_align", "AV-Align"), "floor", "gain",
                              ("val_loss", "val loss"), "parameters", ("train_seconds", "train s"),
                              ("sample_seconds", "sample s")],
                       {"gamma": "g", "av_align": ".3f", "floor": ".3f", "gain": "+.3f", "val_loss": ".4f",
                        "train_seconds": ".0f", "sample_seconds": ".1f"}),
        "![AV-Align](av_align.png)",
        "",
        "![samples](samples.png)",
    ]
    write_report(NAME, "Cross-modal: CMC-PE vs cross-attention for sounding-video diffusion", "\n".join(body),
                 root=root)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--steps", type=int, help="shortcut for --set training.steps=N")
    parser.add_argument("--seeds", type=int, nargs="+", help="shortcut for --set seeds=[...]")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="shortcut for --set variants=[...]")
    parser.add_argument("--jobs", type=int, default=1, help="models trained in parallel (spawned workers)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    args = parser.parse_args(argv)
    preset = preset_from_args(args, NAME)
    if args.steps is not None:
        preset["training"]["steps"] = args.steps
    if args.seeds:
        preset["seeds"] = list(args.seeds)
    if args.variants:
        preset["variants"] = list(args.variants)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    check_preset(preset)
    preset["device"] = device_options(args)

    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    train, val = make_data(preset)
    references = reference_levels(val)
    runs = [(v, s) for s in preset["seeds"] for v in preset["variants"]]
    progress = Progress(len(runs), NAME)
    runs_dir = Path(args.out) / NAME / "runs" / preset["preset"]
    RunStore(runs_dir, resume=args.resume)  # creates the folder before workers write into it
    pool = worker_pool(args.jobs) if args.jobs > 1 else None
    futures = {run: pool.submit(run_one, *run, preset, str(runs_dir), args.resume, args.threads)
               for run in runs} if pool is not None else {}
    rows: list[dict[str, Any]] = []
    samples: dict[str, Any] = {}
    reused, out_dir = 0, None
    shapes = (tuple(train.video.shape[1:]), tuple(train.audio.shape[1:]))
    for variant, seed in runs:
        if pool is None:
            result = run_one(variant, seed, preset, str(runs_dir), args.resume, args.threads, data=(train, val))
        else:
            result = futures[(variant, seed)].result()
        reused += result["reused"]
        rows.extend(result["rows"])
        samples.setdefault(variant, tuple(torch.tensor(x) for x in result["clip"]))
        progress(f"{variant} seed {seed}: " + ", ".join(
            f"gamma {r['gamma']:g} AV-Align {r['av_align']:.3f} (floor {r['floor']:.3f})" for r in result["rows"]))
        out_dir = write_all(rows, samples, len(runs), references, shapes, preset, args.out,
                            time.perf_counter() - start, args.jobs)
    if pool is not None:
        pool.shutdown()
    print(f"{NAME}: {len(runs)} runs ({reused} reused), jobs={args.jobs}")
    summary = summarize(rows)
    print(markdown_table(summary, ["variant", "gamma", ("av_align_pm", "AV-Align"), ("floor_pm", "floor"),
                                   ("gain_pm", "gain")], {"gamma": "g"}))
    print(markdown_table(claims(summary), ["claim", "verdict"]))
    print(f"wrote {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
