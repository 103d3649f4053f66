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
onsets vs video motion peaks within +-1 frame, :mod:`pe_toolkit.domains.crossmodal.alignment`): one run (a
trained model) gives one row per gamma (:meth:`CrossModal.expand`).

**Chance floor.** AV-Align rewards events that happen to coincide, so a model that draws many onsets and
motion peaks scores well above zero without aligning anything (the issue measured 0.18-0.23 for every trained
variant, the level of a jittered noisy video). Each model is therefore scored twice on its own samples: as
drawn, and with every clip's audio paired with the next clip's video (:func:`chance_floor`). The second number
has the same event counts and no alignment; ``gain = AV-Align - floor`` is the alignment the model learned.
The ``none`` connector cannot align (its modalities never meet), so its gain is the check that the floor is
right.

Fairness rule (``docs/benchmarks.md``): every connector trains on the same clips for the same steps with the
same model size and the same learning-rate grid (``training.lrs``, chosen per connector by validation loss on
the first seed, :class:`~pe_toolkit.bench.Tuning`); nothing from the evaluation clips reaches a model (samples
are drawn from noise); every claim comes from :func:`pe_toolkit.bench.verdict.decide_claim`. A comparison
between connectors is *untested* unless at least one of the two aligns beyond its chance floor.

    python benchmarks/crossmodal.py --quick                  # pipeline check, < 2 minutes
    python benchmarks/crossmodal.py --jobs 2                 # the full CPU preset
    pe-toolkit bench crossmodal --preset gpu --accelerator cuda --jobs 4
    python benchmarks/crossmodal.py --set training.steps=2000 --set seeds=[0,1,2] --resume

Presets: ``benchmarks/presets/crossmodal/{quick,full,gpu}.yaml``. Outputs in ``<out>/crossmodal/``:
``results.json``, ``report.md``, ``av_align.png``, ``samples.png``, and every finished run in ``runs/<preset>/``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.checks import distinct, positive, positives
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim, format_side, summarize

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {"connector": "none"},
    "cross_attention": {"connector": "cross_attention", "connector_options": {"time_encoding": "none"}},
    "cmc_pe": {"connector": "cmc_pe"},
    "cross_attention_rope": {"connector": "cross_attention", "connector_options": {"time_encoding": "rope"}},
}
METRICS = ("av_align", "floor", "gain", "audio_events", "video_events", "silent_clips", "val_loss")
BOUNDS = {"av_align": (0.0, 1.0), "floor": (0.0, 1.0), "gain": (-1.0, 1.0), "silent_clips": (0.0, 1.0)}
PAPER_GAMMA = 1.5  # the timestep adjustment of the paper's CLI default
CONTROL_MARGIN = 0.05  # the control "does not align": its AV-Align within 0.05 of its floor (a quarter of ~0.2 chance)


# ------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Data:
    train_clips: int
    eval_clips: int


@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    num_layers: int
    num_steps: int


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    lrs: list[float]


@dataclasses.dataclass
class Sampling:
    sampling_steps: int
    gammas: list[float]


@dataclasses.dataclass
class Config:
    seeds: list[int]
    variants: list[str]
    data: Data
    model: Model
    training: Training
    sampling: Sampling


@functools.lru_cache(maxsize=4)
def clips(count: int, seed: int):
    """``generate_clips(count, seed=seed)``, made once per process."""
    from pe_toolkit.domains.crossmodal import generate_clips

    return generate_clips(count, seed=seed)


def make_data(train_clips: int, eval_clips: int):
    """The training clips (seed 0) and the held-out clips (seed 1) every connector and seed shares."""
    return clips(train_clips, 0), clips(max(eval_clips, 64), 1)


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


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one joint model; score its samples at every gamma (``gammas``); the last seed keeps one drawn clip."""
    import lightning as L

    from pe_toolkit.domains.crossmodal.alignment import av_align_batch
    from pe_toolkit.domains.crossmodal.lightning_module import AVDataModule, JointDiffusionModule

    train, val = make_data(spec["data"]["train_clips"], spec["data"]["eval_clips"])
    model, training, sampling, seed = spec["model"], spec["training"], spec["sampling"], spec["seed"]
    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    module = JointDiffusionModule(
        tuple(train.video.shape[1:]), tuple(train.audio.shape[1:]), dim=model["dim"], num_heads=model["num_heads"],
        num_layers=model["num_layers"], num_steps=model["num_steps"], lr=spec["lr"], max_steps=training["steps"],
        warmup_steps=max(1, training["steps"] // 20), **VARIANTS[spec["variant"]])
    trainer = L.Trainer(max_steps=training["steps"], **trainer_options(spec["device"]), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, check_val_every_n_epoch=10**6)
    datamodule = AVDataModule(train, val, batch_size=training["batch_size"], seed=seed)
    trainer.fit(module, datamodule)
    train_seconds = time.perf_counter() - start
    val_loss = trainer.validate(module, datamodule, verbose=False)[0]["val/loss"]
    module = module.cpu()
    gammas, clip = [], None
    for gamma in sampling["gammas"]:
        t0 = time.perf_counter()
        video, audio = module.sample(spec["data"]["eval_clips"], sampling_steps=sampling["sampling_steps"],
                                     gamma=gamma, seed=10_000 + seed)
        scores, floor = av_align_batch(video, audio), chance_floor(video, audio)
        if spec["draw"] and clip is None:  # for the samples plot
            clip = [encode_picture(x[0]) for x in (video, audio)]
        gammas.append({"gamma": gamma, **scores, "floor": floor["av_align"],
                       "gain": scores["av_align"] - floor["av_align"], "sample_seconds": time.perf_counter() - t0})
    return {"variant": spec["variant"], "seed": seed, "lr": spec["lr"], "val_loss": float(val_loss),
            "train_seconds": train_seconds, "parameters": sum(p.numel() for p in module.model.parameters()),
            "gammas": gammas, "clip": clip}


# ------------------------------------------------------------------------------------------ summary and claims
def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (variant, gamma): every metric's mean and 95 % interval over seeds, non-finite seeds counted."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["variant"], row["gamma"]), []).append(row)
    out = []
    for (variant, gamma), members in groups.items():
        entry: dict[str, Any] = {"variant": variant, "gamma": gamma, "seeds": len(members)}
        for key in METRICS:
            entry[key] = summarize([m.get(key) for m in members], bounds=BOUNDS.get(key)).as_dict()
        out.append(entry)
    return out


def _per_seed(rows: list[dict[str, Any]], variant: str, gamma: float, key: str) -> dict[int, Any]:
    return {r["seed"]: r.get(key) for r in rows if r["variant"] == variant and r["gamma"] == gamma}


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's findings as claim rows (:func:`~pe_toolkit.bench.verdict.decide_claim`).

    * every connector aligns beyond its chance floor (AV-Align above its floor, paired per seed: the same
      samples); the ``none`` control does not (its AV-Align within :data:`CONTROL_MARGIN` of its floor);
    * CMC-PE's gain beats cross-attention's at the paper's gamma (independent trainings: Welch), and the extra
      baseline cross-attention with RoPE's; each untested unless one of the two aligns beyond its floor;
    * the timestep adjustment (gamma 1.5) raises CMC-PE's gain over gamma 1 (the same model per seed: paired);
      untested unless CMC-PE aligns beyond its floor at one of them.
    """
    keys = list(dict.fromkeys((r["variant"], r["gamma"]) for r in rows))
    out: list[dict[str, Any]] = []
    aligns: dict[tuple[str, float], bool] = {}
    for variant, gamma in keys:
        seeds = sorted(_per_seed(rows, variant, gamma, "seed"))
        score = [_per_seed(rows, variant, gamma, "av_align")[s] for s in seeds]
        floor = [_per_seed(rows, variant, gamma, "floor")[s] for s in seeds]
        if variant == "none":
            claim = decide_claim(floor, score, kind="noninferiority", margin=CONTROL_MARGIN, higher_is_better=True,
                                 paired=True, bounds=(0.0, 1.0),
                                 name=f"none (gamma {gamma:g}): the control does not align (AV-Align within "
                                      f"{CONTROL_MARGIN:g} of its chance floor; a = floor, b = AV-Align)")
        else:
            claim = decide_claim(score, floor, higher_is_better=True, paired=True, bounds=(0.0, 1.0),
                                 name=f"{variant} (gamma {gamma:g}) aligns beyond its chance floor "
                                      "(a = AV-Align, b = floor)")
            aligns[(variant, gamma)] = claim.verdict == "reproduced"
        out.append(claim_row(claim, variant=variant, gamma=gamma, metric="av_align"))

    def compare(a: tuple[str, float], b: tuple[str, float], name: str, paired: bool) -> None:
        if a not in keys or b not in keys:
            return
        seeds = sorted(set(_per_seed(rows, *a, "seed")) & set(_per_seed(rows, *b, "seed"))) if paired else None
        gain_a, gain_b = _per_seed(rows, *a, "gain"), _per_seed(rows, *b, "gain")
        values_a = [gain_a[s] for s in seeds] if paired else list(gain_a.values())
        values_b = [gain_b[s] for s in seeds] if paired else list(gain_b.values())
        precondition = (aligns.get(a, False) or aligns.get(b, False),
                        "neither side aligns beyond its chance floor: the gains measure event counts, not alignment")
        claim = decide_claim(values_a, values_b, higher_is_better=True, paired=paired, bounds=BOUNDS["gain"],
                             name=name, preconditions=[precondition])
        out.append(claim_row(claim, variant=f"{a[0]} vs {b[0]}", gamma=f"{a[1]:g} vs {b[1]:g}", metric="gain"))

    gammas = sorted({g for _, g in keys})
    paper = PAPER_GAMMA if PAPER_GAMMA in gammas else gammas[-1]
    compare(("cmc_pe", paper), ("cross_attention", paper),
            f"CMC-PE aligns better than cross-attention (gain, gamma {paper:g})", paired=False)
    # not the paper's baseline: cross-attention whose queries and keys carry RoPE over their own time axes
    compare(("cmc_pe", paper), ("cross_attention_rope", paper),
            f"CMC-PE aligns better than cross-attention with RoPE (an extra baseline; gain, gamma {paper:g})",
            paired=False)
    if 1.0 in gammas and paper != 1.0:
        compare(("cmc_pe", paper), ("cmc_pe", 1.0),
                f"the timestep adjustment (gamma {paper:g}) improves CMC-PE over gamma 1 (gain)", paired=True)
    return out


# ------------------------------------------------------------------------------------------ plots
def plot_scores(summary: list[dict[str, Any]], references: dict[str, float]) -> Any:
    """Bars of AV-Align per variant and gamma (95 % intervals where there are any), each model's chance floor as a
    black tick, and the real-clip levels as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in summary))
    gammas = list(dict.fromkeys(r["gamma"] for r in summary))
    width = 0.8 / max(1, len(gammas))
    fig, ax = plt.subplots(figsize=(2 * len(variants) + 2, 3.5))
    for j, gamma in enumerate(gammas):
        xs = [i + (j - (len(gammas) - 1) / 2) * width for i in range(len(variants))]
        entries = [next((r for r in summary if r["variant"] == v and r["gamma"] == gamma), None) for v in variants]
        sides = [e["av_align"] if e else {"mean": math.nan, "low": math.nan, "high": math.nan} for e in entries]
        ys = [nan_if_missing(s["mean"]) for s in sides]
        errors = [[0.0] * len(ys), [0.0] * len(ys)]
        for i, side in enumerate(sides):
            if math.isfinite(nan_if_missing(side["low"])):
                errors[0][i], errors[1][i] = ys[i] - side["low"], side["high"] - ys[i]
        ax.bar(xs, ys, width, yerr=errors, capsize=3, label=f"gamma = {gamma:g}")
        floors = [nan_if_missing(e["floor"]["mean"]) if e else math.nan for e in entries]
        ax.scatter(xs, floors, marker="_", s=300, color="black", zorder=3,
                   label="its chance floor (re-paired samples)" if j == 0 else None)
    note_if_empty(ax, "AV-Align of the sampled clips")
    ax.axhline(nan_if_missing(references["real"]), color="green", linestyle="--", linewidth=1, label="real clips")
    ax.axhline(nan_if_missing(references["shuffled"]), color="grey", linestyle=":", linewidth=1,
               label="real clips re-paired")
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, fontsize=8)
    ax.set_ylabel("AV-Align of sampled clips")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def encode_picture(x) -> dict[str, Any]:
    """A tensor in [-1, 1] as 255 grey levels (int8, base64) for a plot: compact in results.json.

    Values outside [-1, 1] are stored at the ends, as ``imshow(vmin=-1, vmax=1)`` draws them.
    """
    import base64

    import torch

    levels = (x.detach().cpu().clamp(-1, 1) * 127).round().to(torch.int8)
    return {"shape": list(x.shape), "int8_base64": base64.b64encode(levels.numpy().tobytes()).decode("ascii")}


def decode_picture(encoded: dict[str, Any]):
    """The float array of :func:`encode_picture` (values in [-1, 1], steps of 1/127)."""
    import base64

    import numpy as np

    raw = np.frombuffer(base64.b64decode(encoded["int8_base64"]), dtype=np.int8)
    return raw.reshape(encoded["shape"]).astype(np.float32) / 127


def plot_samples(samples: dict[str, Any]) -> Any:
    """Per variant: one sampled clip's video frames over time (a strip) and its spectrogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    fig, axes = plt.subplots(len(samples), 2, figsize=(12, 1.6 * len(samples)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    for row, (variant, (video, audio)) in enumerate(samples.items()):
        frames, spectrogram = (torch.from_numpy(decode_picture(x)) for x in (video, audio))  # (T_v, H, W), (T_a, F)
        strip = frames.permute(1, 0, 2).reshape(frames.shape[1], -1)  # (H, T_v * W)
        axes[row, 0].imshow(strip.numpy(), cmap="gray", vmin=-1, vmax=1, aspect="auto")
        axes[row, 0].set_ylabel(variant, fontsize=7)
        axes[row, 1].imshow(spectrogram.T.numpy(), origin="lower", aspect="auto", vmin=-1, vmax=1)
        for ax in axes[row]:
            note_if_empty(ax, "the sampled clip")
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_title("video frames over time")
    axes[0, 1].set_title("spectrogram")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------ report
def why_not_note(summary: list[dict[str, Any]], claim_rows: list[dict[str, Any]], references: dict[str, float]) -> str:
    """What the numbers say when no connector aligns beyond its floor (event counts against real clips)."""
    connected = [s for s in summary if s["variant"] != "none"]
    floor_claims = [c for c in claim_rows if c["metric"] == "av_align" and c["variant"] != "none"]
    if not connected or any(c["verdict"] == "reproduced" for c in floor_claims):
        return ""
    audio = [s["audio_events"]["mean"] for s in connected if math.isfinite(s["audio_events"]["mean"])]
    video = [s["video_events"]["mean"] for s in connected if math.isfinite(s["video_events"]["mean"])]
    counts = (f"The connected models draw {min(audio):.2f}-{max(audio):.2f} audio onsets and "
              f"{min(video):.2f}-{max(video):.2f} video motion peaks per clip, against "
              f"{references['real_audio_events']:.2f} and {references['real_video_events']:.2f} in real clips. "
              if audio and video else "")
    return ("**No connector aligns beyond its chance floor at this size and budget.** Each model's AV-Align is what "
            "its own samples score when re-paired with another clip's video, so the scores measure how many events "
            "the samples contain, not where they are. " + counts +
            "The comparison of connectors therefore carries no information here, and its claims are untested.\n\n")


def report_body(result: Result) -> str:
    config, rows = result.config, result.rows
    summary = [s for s in result.derived if s["kind"] == "summary"]
    claim_rows = [c for c in result.derived if c["kind"] == "claim"]
    reference = next(r for r in result.derived if r["kind"] == "reference")
    data, model, training, sampling = config.data, config.model, config.training, config.sampling
    cells = [{"variant": s["variant"], "gamma": s["gamma"], "seeds": s["seeds"],
              **{k: format_side(s[k], ".2f" if k.endswith("events") else ".3f") for k in METRICS}} for s in summary]
    body = [
        f"Bouncing-ball clips: video {tuple(reference['video_shape'])} (T_v, H, W), audio spectrogram "
        f"{tuple(reference['audio_shape'])} (T_a, F); {data.train_clips} training clips. Joint denoiser dim "
        f"{model.dim}, {model.num_layers} block(s) + connector per modality, T = {model.num_steps} diffusion steps, "
        f"{training.steps} training steps of batch {training.batch_size}, lr chosen from {training.lrs} per "
        f"connector ({result.chosen}); {data.eval_clips} clips sampled per model and gamma with "
        f"{sampling.sampling_steps} DDIM steps. Seeds {config.seeds}; device {result.device}; "
        f"{result.seconds:.0f} s.",
        "",
        f"Reference levels on held-out real clips: AV-Align {reference['real']:.3f} as drawn, "
        f"{reference['shuffled']:.3f} re-paired (audio of the next clip); "
        f"{reference['real_audio_events']:.2f} audio onsets and {reference['real_video_events']:.2f} video "
        "motion peaks per clip.",
        "",
        "## How the fairness rule is met",
        "",
        "* Same budget: every connector trains on the same clips, for the same steps and model width, with the "
        f"same learning-rate grid {training.lrs} (the first seed tries each value, validation loss picks one per "
        "connector" + ("; one value: no connector is tuned" if len(training.lrs) == 1 else "") + ").",
        "* Nothing from the evaluation clips reaches a model: clips are sampled from noise; real clips only set "
        "the reference lines and the validation loss.",
        f"* {len(config.seeds)} seeds (initialisation, data order, diffusion noise and sampling noise): mean and "
        "Student-t 95 % interval, runs without a finite value counted; verdicts from "
        "`pe_toolkit.bench.verdict.decide_claim` (the interval of the difference; paired per seed where both sides "
        "come from one model).",
        "* Each model's chance floor is its own samples re-paired (clip i's audio with clip i+1's video): the same "
        "event counts without alignment. A connector comparison is untested unless one side aligns beyond it.",
        "",
        why_not_note(summary, claim_rows, reference) + "## AV-Align of jointly sampled clips (mean [95 % interval])",
        "",
        markdown_table(cells, ["variant", "gamma", "seeds", ("av_align", "AV-Align"), ("floor", "chance floor"),
                               "gain", ("audio_events", "audio onsets / clip"), ("video_events", "video peaks / clip"),
                               ("silent_clips", "clips without events"), ("val_loss", "val loss")], {"gamma": "g"}),
        "",
        "Clips without any event are left out of a run's AV-Align (it is undefined there) and counted in their own "
        "column; a run with no event at all has no AV-Align (counted as non-finite). The paper's claims are CMC-PE > "
        "cross-attention on alignment, and gamma = 1.5 >= gamma = 1.",
        "",
        "## Claims",
        "",
        claims_table(claim_rows),
        "",
        "## Runs",
        "",
        markdown_table(rows, ["variant", "gamma", "seed", "lr", ("av_align", "AV-Align"), "floor", "gain",
                              ("val_loss", "val loss"), "parameters", ("train_seconds", "train s"),
                              ("sample_seconds", "sample s")],
                       {"gamma": "g", "lr": "g", "av_align": ".3f", "floor": ".3f", "gain": "+.3f",
                        "val_loss": ".4f", "train_seconds": ".0f", "sample_seconds": ".1f"}),
        "![AV-Align](av_align.png)",
        "",
        "![samples](samples.png)",
    ]
    return "\n".join(body)


# ------------------------------------------------------------------------------------------ benchmark
class CrossModal(Benchmark):
    name = "crossmodal"
    title = "Cross-modal: CMC-PE vs cross-attention for sounding-video diffusion"
    description = ("AV-Align above each model's chance floor for joint audio-video diffusion: CMC-PE vs "
                   "cross-attention, and the timestep adjustment (Ishii et al. 2024)")
    Config = Config
    key_fields = ("variant", "seed")

    def check(self, config: Config) -> None:
        distinct("seeds", config.seeds)
        distinct("variants", config.variants, allowed=VARIANTS)
        for group in ("data", "model", "sampling"):
            for key, value in dataclasses.asdict(getattr(config, group)).items():
                if key != "gammas":
                    positive(f"{group}.{key}", value)
        positive("training.steps", config.training.steps)
        positive("training.batch_size", config.training.batch_size)
        positives("training.lrs", config.training.lrs)
        positives("sampling.gammas", config.sampling.gammas)
        if config.data.eval_clips < 2:
            raise ValueError(f"data.eval_clips must be >= 2 (the chance floor pairs each clip's audio with another "
                             f"clip's video), got {config.data.eval_clips}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        parts = {"data": dataclasses.asdict(config.data), "model": dataclasses.asdict(config.model),
                 "training": {"steps": config.training.steps, "batch_size": config.training.batch_size},
                 "sampling": dataclasses.asdict(config.sampling)}
        return [{"variant": v, "seed": s, **parts, "draw": s == config.seeds[-1]}
                for s in config.seeds for v in config.variants]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=[float(lr) for lr in config.training.lrs], metric="val_loss",
                      maximize=False, group="variant")

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def expand(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per gamma (the run's drawn clip, if any, on the first)."""
        out = []
        for index, scores in enumerate(row["gammas"]):
            sample_seconds = scores["sample_seconds"]
            out.append({"variant": row["variant"], "gamma": scores["gamma"], "seed": row["seed"],
                        **{k: v for k, v in scores.items() if k not in ("gamma", "sample_seconds")},
                        "lr": row["lr"], "val_loss": row["val_loss"],
                        "train_seconds": row["train_seconds"], "sample_seconds": sample_seconds,
                        "parameters": row["parameters"], "kind": "run",
                        **({"clip": row["clip"]} if index == 0 and row["clip"] is not None else {})})
        return out

    def progress_label(self, row: dict[str, Any]) -> str:
        return f"{row['variant']} seed {row['seed']} lr {row['lr']:g}: " + ", ".join(
            f"gamma {g['gamma']:g} AV-Align {nan_if_missing(g['av_align']):.3f} "
            f"(floor {nan_if_missing(g['floor']):.3f})" for g in row["gammas"])

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        val = make_data(1, result.config.data.eval_clips)[1]
        reference = {"kind": "reference", **reference_levels(val), "video_shape": list(val.video.shape[1:]),
                     "audio_shape": list(val.audio.shape[1:])}
        return ([reference] + [{"kind": "summary", **s} for s in summarize_rows(result.rows)]
                + claims(result.rows))

    def plot(self, result: Result) -> dict[str, Any]:
        summary = [s for s in result.derived if s["kind"] == "summary"]
        reference = next(r for r in result.derived if r["kind"] == "reference")
        samples = {r["variant"]: r["clip"] for r in result.rows if r.get("clip") is not None}
        return {"av_align.png": plot_scores(summary, reference), **({"samples.png": plot_samples(samples)}
                                                                     if samples else {})}

    def report(self, result: Result) -> str:
        return report_body(result)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="crossmodal", prog="python benchmarks/crossmodal.py"))
