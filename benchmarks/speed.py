"""Speed benchmark: one attention layer per encoder, and the bare RoPE application vs other libraries.

Two measurements, all in forked children so that this (parent) process runs no torch compute
(see ``common.py``: OpenMP is not fork-safe once used):

1. **Attention layer.** For every sequence encoder (``pet.list_encoders(domain="sequence")``) and
   length ``L``: forward + backward of one ``pe_toolkit.MultiHeadAttention(dim, heads, causal=True,
   encoding=get_encoder(name, dim, heads, **example_options))`` on float32 input ``(B, L, dim)``.
   The step is ``attn(encoding.embed(x, positions)).sum().backward()`` with ``x.requires_grad``:
   ``embed`` is the identity except for the absolute encoders (sinusoidal, learned, ...), which
   attention alone would never call, so their cost is counted as a Transformer pays it, once
   before the blocks. The learned table's ``max_len`` is raised to ``L`` when its example is shorter.

   * time: all encoders of one ``L`` are timed in one child, round-robin (rotated order per round),
     median and min over the rounds; the number of rounds is chosen from a time budget.
   * memory: a fresh child per (encoder, L) runs one tiny step (L=8, to load the code paths), then
     builds the layer and input at ``L`` and runs one step; its peak RSS growth is reported.

2. **Attention backends** (:mod:`_backend_sweep`): per encoder, backend (``sdpa``, ``blocked``,
   ``tiled``, ``flex``) and length up to 32,768, the time and peak memory (default allocator) of one
   training step; forward + backward against NoPE's SDPA per backend at 2k, 8k and 16k, in interleaved
   rounds in one process, with each backend's first call (the tiled backend's compile) timed; and of
   inference with FlexAttention against dense SDPA; ``torch.compile(fullgraph=True)`` (inductor)
   against eager per encoder at L = 2,048; the overhead of each encoder against NoPE at L = 2,048
   comes from measurement 1 (``backend="auto"``).

3. **RoPE application** at ``(B, H, L, head_dim)`` (default 4, 8, 2048, 64), float32, queries and keys:

   * ours: ``pe_toolkit.encoders.rotary.apply_rope(x, cos, sin)`` on q and on k, with cos/sin
     ``(L, head_dim/2)`` read from the encoder's cache, half-split layout; also ``interleaved=True``.
   * HF transformers: ``apply_rotary_pos_emb(q, k, cos, sin)`` with the ``(B, L, head_dim)`` cos/sin
     that ``LlamaRotaryEmbedding`` returns (half-split layout).
   * rotary-embedding-torch: ``RotaryEmbedding(dim=head_dim).rotate_queries_or_keys`` on q and k,
     and ``apply_rotary_emb(freqs, t)`` with precomputed ``freqs`` (interleaved layout).
   * x-transformers: ``RotaryEmbedding(head_dim)`` frequencies + ``apply_rotary_pos_emb`` (interleaved).

   Each is checked against ours in the same layout (max abs difference) and timed interleaved with
   the others; ratios are theirs / ours, per round, summarised by median and quartiles. A library
   that is not importable gets a row with status "not installed" and no numbers.

Usage::

    python benchmarks/speed.py [--quick] [--lengths 64 128] [--encoders rope alibi] [--out DIR]
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__:
    from . import _backend_sweep as sweep
    from .common import (
        Progress,
        command_line,
        markdown_table,
        note_if_empty,
        paired_ratios,
        peak_memory_in_subprocess,
        results_dir,
        standard_argparser,
        time_interleaved,
        write_report,
        write_results,
    )
else:  # run as a script: benchmarks/ is on sys.path
    import _backend_sweep as sweep
    from common import (
        Progress,
        command_line,
        markdown_table,
        note_if_empty,
        paired_ratios,
        peak_memory_in_subprocess,
        results_dir,
        standard_argparser,
        time_interleaved,
        write_report,
        write_results,
    )

import pe_toolkit as pet  # imports torch; builds nothing large (the parent stays compute-free)

NAME = "speed"
FULL_LENGTHS = (512, 2048, 8192)
QUICK_LENGTHS = (512, 2048)
MIB = 2**20

# Timed rounds per length: new rounds start until budget_s is spent, between min and max rounds.
FULL_TIMING = {"budget_s": 60.0, "min_repeats": 3, "max_repeats": 50}
QUICK_TIMING = {"budget_s": 6.0, "min_repeats": 2, "max_repeats": 20}
FULL_ROPE = {"warmup": 10, "budget_s": 40.0, "min_repeats": 60, "max_repeats": 300}
QUICK_ROPE = {"warmup": 2, "budget_s": 5.0, "min_repeats": 10, "max_repeats": 60}
CHILD_TIMEOUT_S = 1800.0
BIAS_ENCODERS = ("alibi", "t5", "kerple", "fire", "sandwich", "bam", "bam_ssmax", "cope")
FULL_BACKENDS = {"lengths": [2048, 8192, 16384, 32768], "encoders": ["nope", "rope", *BIAS_ENCODERS],
                 "infer_length": 8192, "infer_encoders": ["alibi", "t5", "kerple", "fire", "sandwich", "bam"],
                 "compile_length": 2048, "compile_encoders": ["nope", "rope", *BIAS_ENCODERS], "compile_rounds": 5,
                 "overhead_lengths": [2048, 8192, 16384], "overhead_encoders": list(BIAS_ENCODERS),
                 "overhead_rounds": 7, "overhead_budget_s": 900.0}
QUICK_BACKENDS = {"lengths": [1024], "encoders": ["nope", "alibi", "cope"], "infer_length": 2048,
                  "infer_encoders": ["alibi"], "compile_length": 256, "compile_encoders": ["alibi"],
                  "compile_rounds": 3, "overhead_lengths": [512], "overhead_encoders": ["alibi"],
                  "overhead_rounds": 3, "overhead_budget_s": 30.0}
MEMORY_FRACTION = 0.6  # default cap on a child's memory growth, as a fraction of MemAvailable


# ------------------------------------------------------------------------------ attention layer
def _encoder_options(name: str, length: int) -> dict[str, Any]:
    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:  # a learned table must cover every position of the input
        options["max_len"] = max(int(options["max_len"]), length)
    return options


def make_layer_step(name: str, length: int, batch: int, dim: int, heads: int):
    """Build the layer and input for one configuration; return ``step()`` = one forward + backward."""
    import torch

    encoding = pet.get_encoder(name, dim, heads, **_encoder_options(name, length))
    # an encoding with only an embed hook acts on the input, below; the layer itself is then NoPE
    attention = pet.MultiHeadAttention(dim, heads, causal=True,
                                       encoding=encoding if encoding.acts_in_attention else None)
    x = torch.randn(batch, length, dim, requires_grad=True)
    positions = torch.arange(length)

    def step() -> None:
        attention.zero_grad(set_to_none=True)
        x.grad = None
        attention(encoding.embed(x, positions)).sum().backward()

    return step


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _child_failure(error: RuntimeError) -> str:
    """'failed: <last line>' of a child's error (its exception line, or why it died)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return ("failed: " + lines[-1])[:300] if lines else "failed"


def _short(status: str) -> str:
    """A status short enough for a table cell: out-of-memory errors become 'out of memory'."""
    if "can't allocate memory" in status or "MemoryError" in status or "out-of-memory" in status:
        return "failed: out of memory"
    return status if len(status) <= 80 else status[:77] + "..."


def time_layers(names: list[str], length: int, batch: int, dim: int, heads: int, timing: dict) -> dict:
    """Child: time every encoder's layer step at ``length``, interleaved. Picklable summary."""
    import torch

    torch.manual_seed(0)
    steps, errors = {}, {}
    for name in names:
        try:
            step = make_layer_step(name, length, batch, dim, heads)
            step()  # warm-up call: checks that it runs (and fits in memory), loads the code paths
            steps[name] = step
        except Exception as error:  # noqa: BLE001  (record the failure, keep the others)
            errors[name] = "failed: " + _error_text(error)
    if not steps:
        return {"timings": {}, "errors": errors, "repeats": 0}
    results = time_interleaved(
        steps,
        warmup=0,
        repeats=timing["max_repeats"],
        budget_s=timing["budget_s"],
        min_repeats=timing["min_repeats"],
        drop_errors=True,  # e.g. out of memory in a later round: drop that encoder, keep the others
    )
    timings = {name: r for name, r in results.items() if "error" not in r}
    errors.update({name: "failed: " + r["error"][:300] for name, r in results.items() if "error" in r})
    repeats = max((r["repeats"] for r in timings.values()), default=0)
    return {"timings": timings, "errors": errors, "repeats": repeats}


def _layer_memory(name: str, length: int, batch: int, dim: int, heads: int) -> None:
    import torch

    torch.manual_seed(0)
    make_layer_step(name, length, batch, dim, heads)()


def _layer_warmup(name: str, batch: int, dim: int, heads: int) -> None:
    import torch

    torch.manual_seed(0)
    make_layer_step(name, 8, batch, dim, heads)()


# ----------------------------------------------------------------------------- RoPE application
def rope_application(batch: int, heads: int, length: int, head_dim: int, timing: dict) -> list[dict]:
    """Child: time our apply_rope against the other libraries' RoPE application on q and k."""
    import importlib

    import torch

    from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope

    torch.manual_seed(0)
    q = torch.randn(batch, heads, length, head_dim)
    k = torch.randn(batch, heads, length, head_dim)
    encoding = RotaryEncoding(heads * head_dim, heads)
    cos, sin = encoding.cos_sin(torch.arange(length), torch.float32)  # (L, hd/2), the encoder's cache

    # name -> dict(fn, layout, library, version, what)
    impls: dict[str, dict[str, Any]] = {}
    missing: list[dict] = []

    def ours(interleaved: bool):
        return lambda: (
            apply_rope(q, cos, sin, interleaved=interleaved),
            apply_rope(k, cos, sin, interleaved=interleaved),
        )

    impls["ours"] = dict(
        fn=ours(False),
        layout="half-split",
        library="pe_toolkit",
        version=pet.__version__,
        what="apply_rope(q, cos, sin), apply_rope(k, cos, sin); cos/sin (L, hd/2) cached",
    )
    impls["ours-interleaved"] = dict(
        fn=ours(True),
        layout="interleaved",
        library="pe_toolkit",
        version=pet.__version__,
        what="apply_rope(..., interleaved=True) on q and k",
    )

    def optional(module: str):
        try:
            return importlib.import_module(module)
        except ImportError as error:
            return error

    llama = optional("transformers.models.llama.modeling_llama")
    if isinstance(llama, ImportError):
        missing.append(
            dict(
                implementation="transformers",
                library="transformers",
                status="not installed",
                detail=_error_text(llama),
            )
        )
    else:
        import transformers

        config = transformers.LlamaConfig(
            hidden_size=heads * head_dim,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=length,
            rope_theta=10_000.0,
        )
        rotary = llama.LlamaRotaryEmbedding(config)
        hf_cos, hf_sin = rotary(q, torch.arange(length).expand(batch, length))  # (B, L, hd)
        apply_hf = llama.apply_rotary_pos_emb
        impls["transformers"] = dict(
            fn=lambda: apply_hf(q, k, hf_cos, hf_sin),
            layout="half-split",
            library="transformers",
            version=transformers.__version__,
            what="apply_rotary_pos_emb(q, k, cos, sin); cos/sin (B, L, hd) from LlamaRotaryEmbedding",
        )

    ret = optional("rotary_embedding_torch")
    if isinstance(ret, ImportError):
        missing.append(
            dict(
                implementation="rotary-embedding-torch",
                library="rotary-embedding-torch",
                status="not installed",
                detail=_error_text(ret),
            )
        )
    else:
        from importlib.metadata import version as dist_version

        ret_version = dist_version("rotary-embedding-torch")
        ret_rotary = ret.RotaryEmbedding(dim=head_dim)
        ret_freqs = ret_rotary(torch.arange(length, dtype=torch.float32), seq_len=length)  # (L, hd)
        impls["rotary-embedding-torch"] = dict(
            fn=lambda: (ret_rotary.rotate_queries_or_keys(q), ret_rotary.rotate_queries_or_keys(k)),
            layout="interleaved",
            library="rotary-embedding-torch",
            version=ret_version,
            what="RotaryEmbedding(dim=hd).rotate_queries_or_keys on q and k (frequencies cached by it)",
        )
        impls["rotary-embedding-torch apply"] = dict(
            fn=lambda: (ret.apply_rotary_emb(ret_freqs, q), ret.apply_rotary_emb(ret_freqs, k)),
            layout="interleaved",
            library="rotary-embedding-torch",
            version=ret_version,
            what="apply_rotary_emb(freqs, t) on q and k, freqs (L, hd) precomputed",
        )

    xt = optional("x_transformers.x_transformers")
    if isinstance(xt, ImportError):
        missing.append(
            dict(
                implementation="x-transformers",
                library="x-transformers",
                status="not installed",
                detail=_error_text(xt),
            )
        )
    else:
        from importlib.metadata import version as dist_version

        xt_rotary = xt.RotaryEmbedding(head_dim)
        xt_freqs, xt_scale = xt_rotary.forward_from_seq_len(length)  # (1, L, hd), 1.0
        impls["x-transformers"] = dict(
            fn=lambda: (
                xt.apply_rotary_pos_emb(q, xt_freqs, xt_scale),
                xt.apply_rotary_pos_emb(k, xt_freqs, xt_scale),
            ),
            layout="interleaved",
            library="x-transformers",
            version=dist_version("x-transformers"),
            what="apply_rotary_pos_emb(t, freqs) on q and k, freqs (1, L, hd) from RotaryEmbedding",
        )

    # Same computation? Compare every output with ours in the same layout.
    reference = {"half-split": impls["ours"]["fn"](), "interleaved": impls["ours-interleaved"]["fn"]()}
    for impl in impls.values():
        out = impl["fn"]()
        ref = reference[impl["layout"]]
        impl["max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(out, ref))

    timings = time_interleaved(
        {n: i["fn"] for n, i in impls.items()},
        warmup=timing["warmup"],
        repeats=timing["max_repeats"],
        budget_s=timing["budget_s"],
        min_repeats=timing["min_repeats"],
    )
    rows = []
    for name, impl in impls.items():
        t = timings[name]
        row = dict(
            implementation=name,
            library=impl["library"],
            version=impl["version"],
            layout=impl["layout"],
            what=impl["what"],
            batch=batch,
            heads=heads,
            length=length,
            head_dim=head_dim,
            dtype="float32",
            median_ms=t["median_s"] * 1e3,
            min_ms=t["min_s"] * 1e3,
            repeats=t["repeats"],
            max_abs_diff_vs_ours=impl["max_abs_diff"],
            status="ok",
        )
        vs_ours = paired_ratios(t["times_s"], timings["ours"]["times_s"])
        same = "ours" if impl["layout"] == "half-split" else "ours-interleaved"
        vs_same = paired_ratios(t["times_s"], timings[same]["times_s"])
        row.update(
            ratio_vs_ours=vs_ours["ratio_median"],
            ratio_vs_ours_p25=vs_ours["ratio_p25"],
            ratio_vs_ours_p75=vs_ours["ratio_p75"],
            ratio_vs_same_layout=vs_same["ratio_median"],
            same_layout_reference=same,
        )
        rows.append(row)
    for row in missing:
        row.update(batch=batch, heads=heads, length=length, head_dim=head_dim, dtype="float32")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------- report
def _fmt_ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _layer_tables(rows: list[dict], lengths: list[int], names: list[str]) -> str:
    by_key = {(r["encoder"], r["length"]): r for r in rows}
    table_rows = []
    for name in names:
        entry: dict[str, Any] = {"encoder": name, "hooks": ", ".join(pet.encoder_info(name).hooks) or "none"}
        for length in lengths:
            r = by_key.get((name, length), {})
            ms = r.get("median_ms")
            alone = " (alone)" if str(r.get("timed", "")).startswith("alone") else ""
            entry[f"t{length}"] = _fmt_ms(ms) + alone if ms is not None else _short(r.get("time_status", "n/a"))
            mib = r.get("peak_mib")
            entry[f"m{length}"] = f"{mib:.1f}" if mib is not None else _short(r.get("memory_status", "n/a"))
        table_rows.append(entry)
    time_cols = ["encoder", "hooks"] + [(f"t{L}", f"L={L} ms") for L in lengths]
    mem_cols = ["encoder"] + [(f"m{L}", f"L={L} MiB") for L in lengths]
    alone_note = (
        "\n(alone): failed when interleaved with the other encoders (see below), timed in a process of its own.\n"
        if any(str(r.get("timed", "")).startswith("alone") for r in rows)
        else ""
    )
    return (
        "### Forward + backward time (median ms)\n\n"
        + markdown_table(table_rows, time_cols)
        + alone_note
        + "\n### Peak memory (MiB of RSS growth in a fresh forked process)\n\n"
        + markdown_table(table_rows, mem_cols)
    )


def _rope_table(rows: list[dict]) -> str:
    columns = [
        "implementation",
        "layout",
        ("median_ms", "median ms"),
        ("min_ms", "min ms"),
        ("ratio_vs_ours", "theirs / ours"),
        ("ratio_iqr", "IQR of ratio"),
        ("ratio_vs_same_layout", "theirs / ours same layout"),
        ("max_abs_diff_vs_ours", "max abs diff"),
        "status",
    ]
    shown = []
    for r in rows:
        s = dict(r)
        if "ratio_vs_ours_p25" in r:
            s["ratio_iqr"] = f"{r['ratio_vs_ours_p25']:.2f} to {r['ratio_vs_ours_p75']:.2f}"
        shown.append(s)
    return markdown_table(
        shown,
        columns,
        {
            "median_ms": ".2f",
            "min_ms": ".2f",
            "ratio_vs_ours": ".2f",
            "ratio_vs_same_layout": ".2f",
            "max_abs_diff_vs_ours": ".1e",
        },
    )


def _plot(layer_rows: list[dict], rope_rows: list[dict], names: list[str], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5))
    markers = "os^vD<>phx*+1234"
    for i, name in enumerate(names):
        timed = sorted((r["length"], r["median_ms"]) for r in layer_rows if r["encoder"] == name and r.get("median_ms"))
        mem = sorted((r["length"], r["peak_mib"]) for r in layer_rows if r["encoder"] == name and r.get("peak_mib"))
        style = dict(marker=markers[i % len(markers)], label=name, linestyle="-" if i < 10 else "--")
        if timed:
            ax_t.plot(*zip(*timed), **style)
        if mem:
            ax_m.plot(*zip(*mem), **style)
    empty = {}
    for ax, label, what in ((ax_t, "forward + backward, median ms", "time"),
                            (ax_m, "peak RSS growth, MiB", "peak memory")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        empty[ax] = note_if_empty(ax, what, reason="no configuration was measured in this run")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    if not empty[ax_t]:
        ax_t.legend(fontsize=8, ncol=2)
    ax_t.set_title("one causal attention layer, time")
    ax_m.set_title("one causal attention layer, memory")
    fig.tight_layout()
    path = out_dir / "layer_time_memory_vs_length.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(path)

    measured = [r for r in rope_rows if r.get("status") == "ok"]
    if measured:
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(measured) + 1.5))
        labels = [r["implementation"] for r in measured]
        ax.barh(
            labels,
            [r["median_ms"] for r in measured],
            color=["C0" if r["library"] == "pe_toolkit" else "C1" for r in measured],
        )
        note_if_empty(ax, "RoPE application time", reason="no implementation was measured in this run")
        ax.invert_yaxis()
        r0 = measured[0]
        ax.set_xlabel(f"median ms, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} hd={r0['head_dim']} fp32")
        ax.set_title("RoPE application")
        fig.tight_layout()
        path = out_dir / "rope_application.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------- backends
def backend_overhead_rows(plan: dict, dim: int, heads: int, device: str, memory_limit: int | None,
                          progress) -> list[dict]:
    """Forward + backward time of every (encoder, backend) over NoPE's SDPA, per length: one child per length
    (interleaved rounds, :func:`_backend_sweep.overhead_vs_nope`)."""
    rows: list[dict] = []
    for length in plan["overhead_lengths"]:
        configs, skipped = [], {}
        for name in plan["overhead_encoders"]:
            for backend in [*plan["backends"], "auto"]:
                has_bias = "bias" in pet.encoder_info(name).hooks
                needed = sweep.dense_bytes(length, 1, heads)
                if backend == "sdpa" and has_bias and memory_limit is not None and needed > memory_limit:
                    cap = memory_limit / 2**30
                    skipped[(name, backend)] = (f"skipped: the dense bias, mask and scores need >= "
                                                f"{needed / 2**30:.1f} GiB, over the {cap:.1f} GiB cap")
                elif backend == "flex" and device == "cpu":
                    skipped[(name, backend)] = "skipped: FlexAttention has no backward on the CPU"
                elif backend == "tiled" and name == "cope":
                    skipped[(name, backend)] = "skipped: cope has no pointwise bias (the tiled backend needs one)"
                else:
                    configs.append((name, backend))
        try:
            result, _ = peak_memory_in_subprocess(
                sweep.overhead_vs_nope, configs, length, dim, heads, device, plan["overhead_rounds"],
                plan["overhead_budget_s"], timeout=CHILD_TIMEOUT_S * 4, memory_limit_bytes=memory_limit)
        except RuntimeError as error:
            result = {"errors": {f"{n}/{b}": _child_failure(error) for n, b in configs}, "first_call_s": {},
                      "times_s": {}, "ratios": {}}
        base = result["times_s"].get("nope/sdpa", [])
        for name, backend in [("nope", "sdpa"), *configs, *skipped]:
            key = f"{name}/{backend}"
            row: dict[str, Any] = dict(kind="backend_overhead", encoder=name, backend=backend, length=length, batch=1,
                                       dim=dim, heads=heads, device=device, dtype="float32")
            if key in result["ratios"]:
                times = sorted(result["times_s"][key])
                row.update(ratio_vs_nope_sdpa=result["ratios"][key], median_ms=times[len(times) // 2] * 1e3,
                           nope_sdpa_ms=sorted(base)[len(base) // 2] * 1e3, rounds=len(times),
                           first_call_s=result["first_call_s"][key], status="ok")
            else:
                row.update(ratio_vs_nope_sdpa=None, status=skipped.get((name, backend))
                           or _short("failed: " + result["errors"].get(key, "not measured")))
            rows.append(row)
        progress(f"overhead L={length}: " + ", ".join(
            f"{r['encoder']}/{r['backend']} {r['ratio_vs_nope_sdpa']:.2f}x" for r in rows
            if r["length"] == length and r["status"] == "ok"))
    return rows


def run_backend_sweep(plan: dict, dim: int, heads: int, device: str, memory_limit: int | None,
                      progress) -> tuple[list[dict], list[dict], list[dict]]:
    """Training rows (encoder x backend x length), inference rows (encoder x backend at one length) and
    compiled-vs-eager rows (encoder at one length)."""
    train_rows: list[dict] = []
    for length in plan["lengths"]:
        for name in plan["encoders"]:
            for backend in plan["backends"]:
                row: dict[str, Any] = dict(kind="backend_train", encoder=name, backend=backend, length=length,
                                           batch=1, dim=dim, heads=heads, device=device, dtype="float32")
                needed = sweep.dense_bytes(length, 1, heads)
                has_bias = "bias" in pet.encoder_info(name).hooks
                if backend == "sdpa" and has_bias and memory_limit is not None and needed > memory_limit:
                    row.update(seconds=None, peak_mib=None,
                               status=f"skipped: the dense bias, mask and scores need >= {needed / 2**30:.1f} GiB, "
                                      f"over the {memory_limit / 2**30:.1f} GiB cap")
                elif backend == "flex" and device == "cpu":
                    row.update(seconds=None, peak_mib=None, status="skipped: FlexAttention has no backward on the CPU")
                elif backend == "tiled" and name == "cope":
                    row.update(seconds=None, peak_mib=None,
                               status="skipped: cope has no pointwise bias (the tiled backend needs one)")
                else:
                    try:
                        seconds, peak = peak_memory_in_subprocess(
                            sweep.train_step, name, length, backend, dim, heads, device,
                            warmup=sweep.warm_train(name, backend, dim, heads, device),
                            timeout=CHILD_TIMEOUT_S * 3, memory_limit_bytes=memory_limit)
                        row.update(seconds=seconds, peak_mib=peak / MIB, status="ok")
                    except RuntimeError as error:
                        row.update(seconds=None, peak_mib=None, status=_short(_child_failure(error)))
                train_rows.append(row)
                done = (f"{row['seconds']:.2f} s, {row['peak_mib']:.0f} MiB" if row["status"] == "ok"
                        else row["status"])
                progress(f"train {name} {backend} L={length}: {done}")
    infer_rows: list[dict] = []
    length = plan["infer_length"]
    for name in plan["infer_encoders"]:
        samples = {}
        for backend in ("sdpa", "blocked", "flex"):
            row = dict(kind="backend_infer", encoder=name, backend=backend, length=length, batch=1, dim=dim,
                       heads=heads, device=device, dtype="float32")
            try:
                result, peak = peak_memory_in_subprocess(
                    sweep.infer, name, length, backend, dim, heads, device,
                    warmup=sweep.warm_infer(name, length, backend, dim, heads, device),
                    timeout=CHILD_TIMEOUT_S, memory_limit_bytes=memory_limit)
                samples[backend] = result["sample"]
                row.update(median_ms=result["median_s"] * 1e3, peak_mib=peak / MIB, status="ok")
            except RuntimeError as error:
                row.update(median_ms=None, peak_mib=None, status=_short(_child_failure(error)))
            infer_rows.append(row)
        for row in infer_rows[-3:]:
            if "sdpa" in samples and row["backend"] in samples:
                row["max_abs_diff_vs_sdpa"] = max(abs(a - b) for a, b in zip(samples[row["backend"]], samples["sdpa"]))
        by_backend = {r["backend"]: r for r in infer_rows[-3:]}
        flex, dense = by_backend["flex"], by_backend["sdpa"]
        if flex["status"] == "ok" and dense["status"] == "ok":
            flex["speedup_vs_sdpa"] = dense["median_ms"] / flex["median_ms"]
            flex["memory_ratio_vs_sdpa"] = dense["peak_mib"] / max(flex["peak_mib"], 1e-9)
        progress(f"infer {name} L={length}: " + ", ".join(
            f"{r['backend']} {r['median_ms']:.0f} ms {r['peak_mib']:.0f} MiB" if r["status"] == "ok"
            else f"{r['backend']} {r['status']}" for r in infer_rows[-3:]))
    compile_rows: list[dict] = []
    length = plan["compile_length"]
    for name in plan["compile_encoders"]:
        row = dict(kind="compiled_vs_eager", encoder=name, backend="sdpa", length=length, batch=1, dim=dim,
                   heads=heads, device=device, dtype="float32", compiler="inductor", rounds=plan["compile_rounds"])
        try:
            result, _ = peak_memory_in_subprocess(
                sweep.compiled_vs_eager, name, length, dim, heads, device, plan["compile_rounds"],
                timeout=CHILD_TIMEOUT_S, memory_limit_bytes=memory_limit)
            row.update(eager_ms=result["eager_s"] * 1e3, compiled_ms=result["compiled_s"] * 1e3,
                       speedup=result["eager_s"] / result["compiled_s"], first_call_s=result["first_call_s"],
                       max_abs_diff_out=result["max_abs_diff_out"], max_abs_diff_grad=result["max_abs_diff_grad"],
                       status="ok")
            progress(f"compile {name} L={length}: eager {row['eager_ms']:.0f} ms, compiled {row['compiled_ms']:.0f} ms "
                     f"(first call {row['first_call_s']:.0f} s)")
        except RuntimeError as error:
            row.update(status=_short(_child_failure(error)))
            progress(f"compile {name} L={length}: {row['status']}")
        compile_rows.append(row)
    return train_rows, infer_rows, compile_rows


def overhead_rows(layer_rows: list[dict], length: int = 2048) -> list[dict]:
    """Forward + backward time of each encoder over NoPE's at ``length`` (measurement 1, backend auto)."""
    by_name = {r["encoder"]: r for r in layer_rows if r["length"] == length and r.get("median_ms")}
    if "nope" not in by_name:
        return []
    base = by_name["nope"]["median_ms"]
    return [dict(kind="overhead_vs_nope", encoder=name, length=length, median_ms=r["median_ms"],
                 nope_ms=base, ratio=r["median_ms"] / base) for name, r in by_name.items()]


def _backend_tables(train_rows: list[dict], infer_rows: list[dict], overhead: list[dict],
                    compile_rows: list[dict]) -> str:
    parts = []
    if train_rows:
        lengths = sorted({r["length"] for r in train_rows})
        table = []
        for name in dict.fromkeys(r["encoder"] for r in train_rows):
            for backend in dict.fromkeys(r["backend"] for r in train_rows):
                entry = {"encoder": name, "backend": backend}
                for r in train_rows:
                    if r["encoder"] == name and r["backend"] == backend:
                        entry[f"L{r['length']}"] = (f"{r['seconds']:.2f} s / {r['peak_mib']:.0f} MiB"
                                                    if r["status"] == "ok" else r["status"].split(":")[0])
                table.append(entry)
        parts.append("### Training step per backend (forward + backward: seconds / peak MiB)\n\n"
                     + markdown_table(table, ["encoder", "backend"] + [(f"L{L}", f"L={L}") for L in lengths]))
        skipped = sorted({r["status"] for r in train_rows if r["status"] != "ok"})
        if skipped:
            parts.append("\n".join(f"* {s}" for s in skipped) + "\n")
    if infer_rows:
        parts.append(f"### Inference, forward only, L={infer_rows[0]['length']}\n\n" + markdown_table(
            infer_rows, ["encoder", "backend", ("median_ms", "median ms"), ("peak_mib", "peak MiB"),
                         ("speedup_vs_sdpa", "sdpa / flex time"), ("memory_ratio_vs_sdpa", "sdpa / flex memory"),
                         ("max_abs_diff_vs_sdpa", "max abs diff vs sdpa"), "status"],
            {"median_ms": ".1f", "peak_mib": ".0f", "speedup_vs_sdpa": ".2f", "memory_ratio_vs_sdpa": ".1f",
             "max_abs_diff_vs_sdpa": ".1e"}))
    if overhead:
        parts.append(f"### Overhead against NoPE, L={overhead[0]['length']}, forward + backward, backend auto\n\n"
                     + markdown_table(overhead, ["encoder", ("median_ms", "median ms"), ("ratio", "/ NoPE")],
                                      {"median_ms": ".1f", "ratio": ".2f"}))
    if compile_rows:
        parts.append(f"### Compiled against eager, L={compile_rows[0]['length']}, forward + backward, backend sdpa\n\n"
                     "`torch.compile(layer, fullgraph=True)` (inductor); medians over interleaved rounds after the "
                     "first compiled call, which compiles and is timed on its own.\n\n" + markdown_table(
                         compile_rows, ["encoder", ("eager_ms", "eager ms"), ("compiled_ms", "compiled ms"),
                                        ("speedup", "eager / compiled"), ("first_call_s", "first call s"),
                                        ("max_abs_diff_out", "max abs diff out"),
                                        ("max_abs_diff_grad", "max abs diff grad"), "status"],
                         {"eager_ms": ".1f", "compiled_ms": ".1f", "speedup": ".2f", "first_call_s": ".1f",
                          "max_abs_diff_out": ".1e", "max_abs_diff_grad": ".1e"}))
    return "\n".join(parts)


def _backend_plot(train_rows: list[dict], out_dir: Path) -> Path | None:
    if not train_rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, name in enumerate(dict.fromkeys(r["encoder"] for r in train_rows)):
        for backend, style in (("sdpa", "--"), ("blocked", "-"), ("flex", ":")):
            points = sorted((r["length"], r["peak_mib"]) for r in train_rows
                            if r["encoder"] == name and r["backend"] == backend and r["status"] == "ok")
            if points:
                ax.plot(*zip(*points), linestyle=style, marker="o", color=f"C{i % 10}", label=f"{name} {backend}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    empty = note_if_empty(ax, "peak memory", reason="no training configuration was measured in this run")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("peak RSS growth, MiB (one layer, forward + backward)")
    ax.set_title("Training memory per backend (dashed: dense sdpa, solid: blocked)")
    ax.grid(True, which="both", alpha=0.3)
    if not empty:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / "backend_memory_vs_length.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _overhead_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    lengths = sorted({r["length"] for r in rows})
    table = []
    for name, backend in dict.fromkeys((r["encoder"], r["backend"]) for r in rows):
        entry = {"encoder": name, "backend": backend}
        for r in rows:
            if r["encoder"] == name and r["backend"] == backend:
                entry[f"L{r['length']}"] = (f"{r['ratio_vs_nope_sdpa']:.2f}x ({r['median_ms']:.0f} ms)"
                                            if r["status"] == "ok" else r["status"].split(":")[0])
                if r["status"] == "ok":
                    entry[f"f{r['length']}"] = f"{r['first_call_s']:.1f}"
        table.append(entry)
    rounds = ", ".join(f"L={L}: {max((r.get('rounds', 0) for r in rows if r['length'] == L), default=0)}"
                       for L in lengths)
    return ("\n### Forward + backward against NoPE's SDPA, per backend (interleaved rounds in one process)\n\n"
            "Per round, each configuration's step over NoPE's SDPA step of the same round; median over the rounds "
            f"({rounds}); in brackets the median step. `first call s`: the first step of each configuration in "
            "its process (the tiled backend compiles its tile steps there; other backends load their code "
            "paths). `auto` is what `backend=\"auto\"` chose.\n\n"
            + markdown_table(table, ["encoder", "backend"] + [(f"L{L}", f"L={L}") for L in lengths]
                             + [(f"f{L}", f"first call s, L={L}") for L in lengths]))


def _overhead_plot(rows: list[dict], out_dir: Path) -> Path | None:
    measured = [r for r in rows if r["status"] == "ok" and r["encoder"] != "nope"]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    styles = {"sdpa": "--", "blocked": "-.", "tiled": "-", "flex": ":", "auto": (0, (1, 3))}
    for i, name in enumerate(dict.fromkeys(r["encoder"] for r in measured)):
        for backend, style in styles.items():
            points = sorted((r["length"], r["ratio_vs_nope_sdpa"]) for r in measured
                            if r["encoder"] == name and r["backend"] == backend)
            if points:
                ax.plot(*zip(*points), linestyle=style, marker="o", color=f"C{i % 10}", label=f"{name} {backend}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    empty = note_if_empty(ax, "overhead", reason="no configuration was measured in this run")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("forward + backward time / NoPE SDPA (median of per-round ratios)")
    ax.set_title("Overhead against NoPE per backend (solid: tiled, dashed: sdpa, dash-dot: blocked)")
    ax.grid(True, which="both", alpha=0.3)
    if not empty:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / "overhead_vs_length.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------- main
def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def build_parser():
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        help=f"sequence lengths (default {list(FULL_LENGTHS)}, quick {list(QUICK_LENGTHS)})",
    )
    parser.add_argument("--encoders", nargs="+", help="encoders to run (default: every sequence encoder)")
    parser.add_argument("--batch", type=int, default=1, help="batch size of the layer benchmark (1)")
    parser.add_argument("--dim", type=int, default=256, help="model width of the layer benchmark (256)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads of the layer benchmark (4)")
    parser.add_argument(
        "--rope-shape",
        type=int,
        nargs=4,
        default=[4, 8, 2048, 64],
        metavar=("B", "H", "L", "HD"),
        help="shape of the RoPE application comparison (4 8 2048 64)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="exact number of timed rounds per length (default: rounds until a time budget is spent)",
    )
    parser.add_argument(
        "--rope-repeats",
        type=int,
        default=None,
        help="exact number of timed rounds of the RoPE comparison (default: rounds until a budget is spent)",
    )
    parser.add_argument(
        "--memory-limit-gib",
        type=float,
        default=None,
        help=f"cap on each child's memory growth; a configuration above it is reported as "
        f"failed (default: {MEMORY_FRACTION * 100:.0f}%% of MemAvailable at start)",
    )
    parser.add_argument("--no-rope-apply", action="store_true", help="skip the RoPE application comparison")
    parser.add_argument("--no-backends", action="store_true", help="skip the attention-backend measurements")
    parser.add_argument("--backend-lengths", type=int, nargs="+",
                        help=f"training lengths of the backend sweep (default {FULL_BACKENDS['lengths']}, "
                             f"quick {QUICK_BACKENDS['lengths']})")
    parser.add_argument("--backend-encoders", nargs="+", help="encoders of the backend sweep")
    parser.add_argument("--infer-length", type=int, help="length of the inference comparison (default 8192, "
                                                         "quick 2048)")
    parser.add_argument("--infer-encoders", nargs="+", help="encoders of the inference comparison")
    parser.add_argument("--compile-length", type=int, help="length of the compiled-vs-eager comparison "
                                                           "(default 2048, quick 256)")
    parser.add_argument("--compile-encoders", nargs="*", help="encoders of the compiled-vs-eager comparison "
                                                              "(none: skip it)")
    parser.add_argument("--backends", nargs="+", choices=("sdpa", "blocked", "tiled", "flex"), default=None,
                        help="training backends (default sdpa blocked tiled; flex trains on CUDA only)")
    parser.add_argument("--overhead-lengths", type=int, nargs="*",
                        help=f"lengths of the interleaved overhead-vs-NoPE timing per backend (default "
                             f"{FULL_BACKENDS['overhead_lengths']}, quick {QUICK_BACKENDS['overhead_lengths']}; "
                             "none: skip it)")
    parser.add_argument("--overhead-encoders", nargs="+", help="encoders of the overhead-vs-NoPE timing")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="device of the backend sweep (auto: cuda when available)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    start = time.perf_counter()
    load_at_start = _load_average()
    available = pet.list_encoders(domain="sequence")
    names = args.encoders or available
    unknown = [n for n in names if n not in available]
    if unknown:
        parser.error(f"unknown encoder(s) {unknown}; sequence encoders: {', '.join(available)}")
    lengths = args.lengths or list(QUICK_LENGTHS if args.quick else FULL_LENGTHS)
    if any(L < 1 for L in lengths) or args.batch < 1 or args.dim < 1 or args.heads < 1 or min(args.rope_shape) < 1:
        parser.error("lengths, --batch, --dim, --heads and --rope-shape must be positive")
    if args.dim % args.heads:
        parser.error(f"--heads ({args.heads}) must divide --dim ({args.dim})")
    if args.rope_shape[3] % 2:
        parser.error(f"--rope-shape head_dim must be even, got {args.rope_shape[3]}")
    timing = dict(QUICK_TIMING if args.quick else FULL_TIMING)
    rope_timing = dict(QUICK_ROPE if args.quick else FULL_ROPE)
    for option, value in (("--repeats", args.repeats), ("--rope-repeats", args.rope_repeats)):
        if value is not None and value < 1:
            parser.error(f"{option} must be >= 1, got {value}")
    if args.repeats is not None:
        timing.update(budget_s=None, min_repeats=args.repeats, max_repeats=args.repeats)
    if args.rope_repeats is not None:
        rope_timing.update(warmup=1, budget_s=None, min_repeats=args.rope_repeats, max_repeats=args.rope_repeats)
    available_bytes = _available_memory_bytes()
    if args.memory_limit_gib is not None:
        memory_limit = int(args.memory_limit_gib * 2**30)
    else:
        memory_limit = int(available_bytes * MEMORY_FRACTION) if available_bytes else None
    shape = dict(batch=args.batch, dim=args.dim, heads=args.heads)
    out_dir = results_dir(NAME, args.out)

    plan, device = None, "cpu"
    if not args.no_backends:
        import torch

        device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
        defaults = QUICK_BACKENDS if args.quick else FULL_BACKENDS
        plan = dict(defaults, backends=args.backends or (["sdpa", "blocked", "tiled", "flex"] if device == "cuda"
                                                          else ["sdpa", "blocked", "tiled"]))
        if args.overhead_lengths is not None:
            if any(L < 1 for L in args.overhead_lengths):
                parser.error(f"--overhead-lengths must be positive, got {args.overhead_lengths}")
            plan["overhead_lengths"] = args.overhead_lengths
        if args.overhead_encoders:
            unknown = [n for n in args.overhead_encoders if n not in available]
            if unknown:
                parser.error(f"unknown --overhead-encoders {unknown}; sequence encoders: {', '.join(available)}")
            plan["overhead_encoders"] = args.overhead_encoders
        if args.backend_lengths:
            plan["lengths"] = args.backend_lengths
        if args.backend_encoders:
            unknown = [n for n in args.backend_encoders if n not in available]
            if unknown:
                parser.error(f"unknown --backend-encoders {unknown}; sequence encoders: {', '.join(available)}")
            plan["encoders"] = args.backend_encoders
        if args.infer_length is not None:
            if args.infer_length < 1:
                parser.error(f"--infer-length must be >= 1, got {args.infer_length}")
            plan["infer_length"] = args.infer_length
        if args.infer_encoders:
            unknown = [n for n in args.infer_encoders if n not in available]
            if unknown:
                parser.error(f"unknown --infer-encoders {unknown}; sequence encoders: {', '.join(available)}")
            plan["infer_encoders"] = args.infer_encoders
        if args.compile_length is not None:
            if args.compile_length < 1:
                parser.error(f"--compile-length must be >= 1, got {args.compile_length}")
            plan["compile_length"] = args.compile_length
        if args.compile_encoders is not None:
            unknown = [n for n in args.compile_encoders if n not in available]
            if unknown:
                parser.error(f"unknown --compile-encoders {unknown}; sequence encoders: {', '.join(available)}")
            plan["compile_encoders"] = args.compile_encoders
    sweep_steps = 0 if plan is None else (len(plan["lengths"]) * len(plan["encoders"]) * len(plan["backends"])
                                          + len(plan["infer_encoders"]) + len(plan["compile_encoders"])
                                          + len(plan["overhead_lengths"]))
    layer_rows: list[dict] = []
    progress = Progress(len(lengths) * (1 + len(names)) + sweep_steps + (0 if args.no_rope_apply else 1), NAME)
    for length in lengths:
        child_start = time.perf_counter()
        try:
            timed, _ = peak_memory_in_subprocess(
                time_layers,
                names,
                length,
                args.batch,
                args.dim,
                args.heads,
                timing,
                timeout=CHILD_TIMEOUT_S,
                memory_limit_bytes=memory_limit,
            )
        except RuntimeError as error:
            timed = {"timings": {}, "errors": dict.fromkeys(names, _child_failure(error)), "repeats": 0}
        timed_with = dict.fromkeys(timed["timings"], f"interleaved with {len(timed['timings'])} encoders")
        if len(names) > 1:
            # What failed next to the others (e.g. out of memory while other layers held their memory)
            # gets a second chance in a process of its own.
            for name in [n for n in names if n not in timed["timings"]]:
                try:
                    alone, _ = peak_memory_in_subprocess(
                        time_layers,
                        [name],
                        length,
                        args.batch,
                        args.dim,
                        args.heads,
                        timing,
                        timeout=CHILD_TIMEOUT_S,
                        memory_limit_bytes=memory_limit,
                    )
                except RuntimeError as error:
                    alone = {"timings": {}, "errors": {name: _child_failure(error)}}
                if name in alone["timings"]:
                    timed["timings"][name] = alone["timings"][name]
                    timed_with[name] = f"alone (interleaved run: {_short(timed['errors'].pop(name))})"
                else:
                    timed["errors"][name] = alone["errors"].get(name, "failed")
        progress(
            f"L={length}: timed {len(timed['timings'])} encoders x {timed['repeats']} rounds "
            f"({time.perf_counter() - child_start:.1f} s)"
        )
        for name in names:
            row: dict[str, Any] = dict(
                kind="attention_layer",
                encoder=name,
                hooks=list(pet.encoder_info(name).hooks),
                length=length,
                **shape,
                head_dim=args.dim // args.heads,
                dtype="float32",
                causal=True,
                options=_encoder_options(name, length),
            )
            if name in timed["timings"]:
                t = timed["timings"][name]
                row.update(
                    median_ms=t["median_s"] * 1e3,
                    min_ms=t["min_s"] * 1e3,
                    repeats=t["repeats"],
                    time_status="ok",
                    timed=timed_with[name],
                )
            else:
                row.update(median_ms=None, min_ms=None, repeats=0, time_status=timed["errors"].get(name, "failed"))
            try:
                _, peak = peak_memory_in_subprocess(
                    _layer_memory,
                    name,
                    length,
                    args.batch,
                    args.dim,
                    args.heads,
                    warmup=functools.partial(_layer_warmup, name, args.batch, args.dim, args.heads),
                    timeout=CHILD_TIMEOUT_S,
                    memory_limit_bytes=memory_limit,
                )
                row.update(peak_mib=peak / MIB, memory_status="ok")
            except RuntimeError as error:
                row.update(peak_mib=None, memory_status=_child_failure(error))
            layer_rows.append(row)
            ms = f"{row['median_ms']:.2f} ms" if row["median_ms"] is not None else _short(row["time_status"])
            mib = f"{row['peak_mib']:.1f} MiB" if row["peak_mib"] is not None else _short(row["memory_status"])
            progress(f"{name} L={length}: {ms}, {mib}")

    train_rows: list[dict] = []
    infer_rows: list[dict] = []
    compile_rows: list[dict] = []
    backend_overhead: list[dict] = []
    if plan is not None:
        train_rows, infer_rows, compile_rows = run_backend_sweep(plan, args.dim, args.heads, device, memory_limit,
                                                                 progress)
        backend_overhead = backend_overhead_rows(plan, args.dim, args.heads, device, memory_limit, progress)
    overhead = overhead_rows(layer_rows)

    rope_rows: list[dict] = []
    if not args.no_rope_apply:
        b, h, length, hd = args.rope_shape
        try:
            rope_rows, _ = peak_memory_in_subprocess(
                rope_application,
                b,
                h,
                length,
                hd,
                rope_timing,
                timeout=CHILD_TIMEOUT_S,
                memory_limit_bytes=memory_limit,
            )
        except RuntimeError as error:
            rope_rows = [
                dict(
                    implementation="all",
                    library="n/a",
                    batch=b,
                    heads=h,
                    length=length,
                    head_dim=hd,
                    dtype="float32",
                    status=_child_failure(error),
                )
            ]
        for r in rope_rows:
            r["kind"] = "rope_application"
        hf = next((r for r in rope_rows if r["implementation"] == "transformers"), rope_rows[0])
        progress(
            "RoPE application: "
            + (
                f"transformers / ours = {hf['ratio_vs_ours']:.2f}"
                if hf["status"] == "ok"
                else f"{hf['implementation']}: {hf['status']}"
            )
        )

    seconds = time.perf_counter() - start
    config = dict(
        quick=args.quick,
        lengths=lengths,
        encoders=names,
        **shape,
        head_dim=args.dim // args.heads,
        dtype="float32",
        causal=True,
        layer_timing=timing,
        rope_shape=dict(zip(("batch", "heads", "length", "head_dim"), args.rope_shape)),
        rope_timing=None if args.no_rope_apply else rope_timing,
        memory_limit_bytes=memory_limit,
        load_average_1min_at_start=load_at_start,
        load_average_1min_at_end=_load_average(),
        step="attention(encoding.embed(x, positions)).sum().backward(), x (B, L, dim) float32 requires_grad",
        backend_sweep=plan,
        backend_device=device,
        allocator="glibc defaults in every child (no mallopt, no MALLOC_* environment variables)",
    )
    rows = layer_rows + train_rows + infer_rows + compile_rows + overhead + backend_overhead + rope_rows
    write_results(NAME, config, rows, seconds, root=args.out)
    plots = _plot(layer_rows, rope_rows, names, out_dir)
    backend_plot = _backend_plot(train_rows, out_dir)
    if backend_plot is not None:
        plots.append(backend_plot)
    overhead_plot = _overhead_plot(backend_overhead, out_dir)
    if overhead_plot is not None:
        plots.append(overhead_plot)

    command = command_line(sys.argv[1:] if argv is None else argv, script=__file__)
    body = [
        f"One causal `MultiHeadAttention(dim={args.dim}, num_heads={args.heads})` layer (head_dim "
        f"{args.dim // args.heads}), batch {args.batch}, float32, forward + backward "
        "(`attn(enc.embed(x, pos)).sum().backward()`, input requiring grad), each encoder built with its "
        "registry `example_options` (learned: `max_len` raised to L). Time: median over the rounds "
        "(all encoders of one L interleaved in one forked process, after one warm-up call each; "
        + (
            f"new rounds start until {timing['budget_s']:.0f} s are spent, "
            f"{timing['min_repeats']} to {timing['max_repeats']} rounds). "
            if timing["budget_s"] is not None
            else f"{timing['max_repeats']} rounds). "
        )
        + "Memory: peak RSS growth of a fresh forked process that builds the layer and input and runs one step "
        "(after a tiny L=8 step that loads the code paths). "
        + (
            f"Each forked process may grow by at most {memory_limit / 2**30:.1f} GiB of address space "
            "(`--memory-limit-gib`); a configuration above it is reported as failed (out of memory).\n"
            if memory_limit is not None
            else "\n"
        ),
        "Rounds used per length: "
        + ", ".join(
            f"L={L}: {next((r['repeats'] for r in layer_rows if r['length'] == L and r['repeats']), 0)}"
            for L in lengths
        )
        + ".\n",
        _layer_tables(layer_rows, lengths, names),
    ]
    failures = [
        f"* {r['encoder']} L={r['length']} {what}: {r[key]}"
        for r in layer_rows
        for key, what in (("time_status", "time"), ("memory_status", "memory"))
        if r.get(key, "ok") != "ok"
    ]
    if failures:
        body.append("\nFailed configurations (not measured):\n\n" + "\n".join(failures) + "\n")
    alone = [
        f"* {r['encoder']} L={r['length']}: timed {r['timed']}, {r['repeats']} rounds"
        for r in layer_rows
        if str(r.get("timed", "")).startswith("alone")
    ]
    if alone:
        body.append("\nTimed in a process of their own:\n\n" + "\n".join(alone) + "\n")
    if train_rows or infer_rows or overhead or compile_rows or backend_overhead:
        body += [
            "\n## Attention backends\n",
            sweep.__doc__.split("\n\n", 1)[1].strip() + "\n",
            "GPU rows: " + ("measured on CUDA.\n" if any(r.get("device") == "cuda" for r in train_rows + infer_rows)
                            else "not measured (no GPU in this run).\n"),
            _backend_tables(train_rows, infer_rows, overhead, compile_rows),
            _overhead_table(backend_overhead),
        ]
    if rope_rows:
        r0 = rope_rows[0]
        body += [
            f"\n### RoPE application, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} "
            f"head_dim={r0['head_dim']} float32\n",
            "`theirs / ours`: per-round ratio of this implementation's time to ours "
            "(`apply_rope`, half-split, cos/sin `(L, hd/2)` from the encoder cache), "
            "median and interquartile range over "
            f"{rope_rows[0].get('repeats', 0)} interleaved rounds; above 1 means ours is faster. "
            "`same layout` compares interleaved libraries with `apply_rope(..., interleaved=True)`. "
            "`max abs diff`: largest difference of the outputs from ours in the same layout.\n",
            _rope_table(rope_rows),
            "\n"
            + "\n".join(
                f"* `{r['implementation']}` ({r['library']} {r.get('version', '')}): {r['what']}"
                for r in rope_rows
                if r.get("status") == "ok"
            ),
        ]
        if any(r.get("status") != "ok" for r in rope_rows):
            body.append(
                "\n"
                + "\n".join(f"* `{r['implementation']}`: {r['status']}" for r in rope_rows if r.get("status") != "ok")
            )
    body.append("\nPlots: " + ", ".join(f"![{p.stem}]({p.name})" for p in plots))
    body.append(
        f"\nTotal wall time: {seconds:.1f} s. Load average (1 min) at start {load_at_start}, at end "
        f"{config['load_average_1min_at_end']} on {os.cpu_count()} CPUs (this benchmark itself adds up to "
        "about the number of torch threads; more means other work shared the CPUs and slowed the timings)."
    )
    write_report(
        NAME,
        "Speed: attention layer per encoder and RoPE application",
        "\n".join(body),
        root=args.out,
        command=command,
    )
    print(f"wrote {out_dir} in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
