"""The registry of benchmarks: name -> (module, one line of what it measures).

Listing needs no import of the benchmark modules (their domain dependencies load only when one runs).
A user's benchmark runs without registering: ``pe-toolkit bench my_package.my_module:MyBenchmark``, or
``register("mine", "my_package.my_module:MyBenchmark", "what it measures")`` for a name.
"""

from __future__ import annotations

import importlib

from pe_toolkit.bench.protocol import Benchmark

__all__ = ["BENCHMARKS", "get_benchmark", "list_benchmarks", "register"]

BENCHMARKS: dict[str, tuple[str, str]] = {
    "attention_stability": ("pe_toolkit.benchmarks.attention_stability:AttentionStability",
                            "final loss and attention logits over a base learning-rate sweep: MHA, QK-norm, the "
                            "Q/K learning-rate rule, MLA, QK-clip (Anson & Aitchison 2025; Kimi K2)"),
    "crossmodal": ("pe_toolkit.benchmarks.crossmodal:CrossModal",
                   "AV-Align above each model's chance floor for joint audio-video diffusion: CMC-PE vs "
                   "cross-attention, and the timestep adjustment (Ishii et al. 2024)"),
    "detection": ("pe_toolkit.benchmarks.detection:Detection",
                  "RecursiveDet's shared decoder stage with box / centerness PEs against independent stages: "
                  "COCO mAP and parameters, a 2 x 2 design (Zhao et al. 2023)"),
    "explain": ("pe_toolkit.benchmarks.explain:Explain",
                "faithfulness of PE-aware LRP against plain LRP, gradient x input and rollout: perturbation AUCs "
                "and conservation (Bakish et al. 2025)"),
    "extrapolation": ("pe_toolkit.benchmarks.extrapolation:Extrapolation",
                      "perplexity vs length and passkey retrieval past the training context: NoPE temperatures, "
                      "RoPE scalings (PI, NTK, YaRN, Llama 3.1, LongRoPE, dynamic), ALiBi, T5, KERPLE, FIRE, BAM"),
    "extreme_inputs": ("pe_toolkit.benchmarks.extreme_inputs:ExtremeInputs",
                       "every sequence encoder at long lengths and far positions, float32 and bfloat16: finite "
                       "outputs, precision loss, memory"),
    "graphs": ("pe_toolkit.benchmarks.graphs:Graphs",
               "CSL and PATTERN / CLUSTER accuracy per graph PE x model, and RWSE / LapPE precompute time against "
               "PyG"),
    "length_generalization": ("pe_toolkit.benchmarks.length_generalization:LengthGeneralization",
                              "exact match in and beyond the training lengths per encoder on synthetic tasks: copy, "
                              "SCAN, counting, selective copy (Kazemnejad et al. 2023; CoPE; Golkar et al. 2024)"),
    "mha2mla": ("pe_toolkit.benchmarks.mha2mla:Mha2Mla",
                "MHA -> MLA conversion per partial-RoPE strategy and latent size: KV-cache reduction against "
                "validation loss, and absorbed vs plain decoding (Ji et al. 2025)"),
    "multirobot": ("pe_toolkit.benchmarks.multirobot:MultiRobot",
                   "NOPE with each object PE against tuned RANSAC + Procrustes on simulated robot pairs: match F1, "
                   "non-overlap detection, pose success, bytes per message (Huang et al. 2025)"),
    "music": ("pe_toolkit.benchmarks.music:Music",
              "structure-informed PEs on Bach chorales: next-step prediction and accompaniment, NLL and generation "
              "metrics (Agarwal et al. 2024)"),
    "recsys": ("pe_toolkit.benchmarks.recsys:Recsys",
               "SASRec with each positional encoding on MovieLens-100k and a contextual-count log: HR/NDCG/MRR"),
    "speed": ("pe_toolkit.benchmarks.speed:Speed",
              "time and memory of one attention layer per encoder and backend, torch.compile against eager, and "
              "RoPE application against transformers / rotary-embedding-torch / x-transformers"),
    "translation": ("pe_toolkit.benchmarks.translation:Translation",
                    "XL-PE (input and head strategies) against PE alone on a toy SVO -> SOV pair: test BLEU (Ding "
                    "et al. 2020)"),
    "vision": ("pe_toolkit.benchmarks.vision:Vision",
               "ViT accuracy at test resolutions it was not trained on, per 2-D encoding (Heo et al. 2024)"),
}
"""``{name: ("module:Class", description)}`` of the benchmarks that run on the harness."""


def register(name: str, target: str, description: str) -> None:
    """Add a benchmark: ``target`` is ``"module:Class"`` (a :class:`Benchmark` subclass)."""
    if not isinstance(target, str) or ":" not in target:
        raise ValueError(f"target must be 'module:Class', got {target!r}")
    BENCHMARKS[name] = (target, description)


def list_benchmarks() -> dict[str, str]:
    """``{name: description}``, sorted by name."""
    return {name: BENCHMARKS[name][1] for name in sorted(BENCHMARKS)}


def get_benchmark(name: str) -> Benchmark:
    """An instance of the benchmark ``name`` (a registered name, or ``"module:Class"``)."""
    target = BENCHMARKS[name][0] if name in BENCHMARKS else name
    if ":" not in target:
        raise ValueError(f"unknown benchmark {name!r}; available: {', '.join(sorted(BENCHMARKS))} "
                         "(or a 'module:Class' of your own)")
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name.split(".")[0] and error.name != module_name:
            raise  # the module is there; something it imports is not
        raise ValueError(f"{target!r}: no module {module_name!r} here (run from its folder, or put that folder on "
                         "PYTHONPATH)") from error
    cls = getattr(module, attribute, None)
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        found = sorted(k for k, v in vars(module).items()
                       if isinstance(v, type) and issubclass(v, Benchmark) and v is not Benchmark)
        what = "has no attribute" if cls is None else "has an attribute that is not a Benchmark subclass:"
        raise ValueError(f"{target!r}: module {module_name!r} {what} {attribute!r}; pe_toolkit.bench.Benchmark "
                         f"subclasses there: {found or 'none'}")
    return cls()
