"""Speed: one attention layer per encoder, the attention backends, and the bare RoPE application vs other libraries.

Every measurement runs in a forked child (:func:`pe_toolkit.bench.memory.peak_memory_in_subprocess`), so
the runner's process runs no torch compute; the runs are timings, so they run one at a time
(``exclusive``: the runner ignores ``--jobs`` for them). Times are read on torch.utils.benchmark's
clock, which synchronises CUDA (:mod:`pe_toolkit.bench.timing`).

1. **Attention layer** (``layer``). For every sequence encoder and length ``L``: forward + backward of one
   ``MultiHeadAttention(dim, heads, causal=True, encoding=get_encoder(name, dim, heads, **example_options))``
   on float32 input ``(B, L, dim)``: ``attn(encoding.embed(x, positions)).sum().backward()`` with
   ``x.requires_grad`` (``embed`` is the identity except for the absolute encoders, whose cost is counted
   as a Transformer pays it, once before the blocks; the learned table's ``max_len`` is raised to ``L``).

   * time: all encoders of one ``L`` in one child, interleaved rounds (rotated order), median and min;
     new rounds start until ``timing.budget_s`` is spent (between ``min_repeats`` and ``max_repeats``).
     An encoder that fails next to the others (e.g. out of memory) is timed again in a child of its own.
   * memory: a fresh child per (encoder, L) runs a tiny L=8 step (to load the code paths), then builds
     the layer and input at ``L`` and runs one step; its peak RSS growth is reported.

2. **Attention backends** (``backends``, :mod:`_backend_sweep`): the time and peak memory of one training
   step per encoder, backend and length; forward + backward against NoPE's SDPA per backend in
   interleaved rounds; inference with FlexAttention against dense SDPA; ``torch.compile`` against eager.
   These run on ``--accelerator`` (``auto``: CUDA when there is one); the layer and RoPE parts on the CPU.

3. **RoPE application** (``rope``) at ``(B, H, L, head_dim)``, float32, q and k: ours
   (``apply_rope``, half-split and interleaved) against HF transformers, rotary-embedding-torch and
   x-transformers, each checked against ours in the same layout (max abs difference) and timed
   interleaved; ratios theirs / ours per round (median, quartiles). A library that is not installed
   gets a row "not installed" and no numbers.

    pe-toolkit bench speed --quick                     # = --preset quick: a pipeline check
    pe-toolkit bench speed --set layer.encoders=[rope,alibi] --set layer.lengths=[512]
    pe-toolkit bench speed --preset gpu --accelerator cuda
    python benchmarks/speed.py --quick                 # the same code

Needs only the core and the ``plot`` extra (and the harness's jsonargparse / PyYAML); the reference
libraries of part 3 are optional.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from typing import Any

import pe_toolkit as pet
from pe_toolkit.bench import Benchmark, Result
from pe_toolkit.bench.memory import peak_memory_in_subprocess
from pe_toolkit.bench.plots import note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.timing import paired_ratios, time_interleaved
from pe_toolkit.benchmarks import _backend_sweep as sweep

MIB = 2**20
CHILD_TIMEOUT_S = 1800.0
MEMORY_FRACTION = 0.6  # default cap on a child's memory growth, as a fraction of MemAvailable
BACKENDS = ("sdpa", "blocked", "tiled", "flex")


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Timing:
    """Rounds: new ones start until ``budget_s`` is spent (``None``: exactly ``max_repeats``)."""

    budget_s: float | None
    min_repeats: int
    max_repeats: int
    warmup: int = 0


@dataclasses.dataclass
class Layer:
    lengths: list[int]
    timing: Timing
    encoders: list[str] = dataclasses.field(default_factory=list)  # empty: every sequence encoder
    batch: int = 1
    dim: int = 256
    heads: int = 4


@dataclasses.dataclass
class Backends:
    enabled: bool
    backends: list[str]
    lengths: list[int]
    encoders: list[str]
    infer_length: int
    infer_encoders: list[str]
    compile_length: int
    compile_encoders: list[str]
    compile_rounds: int
    overhead_lengths: list[int]
    overhead_encoders: list[str]
    overhead_rounds: int
    overhead_budget_s: float | None


@dataclasses.dataclass
class Rope:
    enabled: bool
    shape: list[int]  # B, H, L, head_dim
    timing: Timing


@dataclasses.dataclass
class Config:
    layer: Layer
    backends: Backends
    rope: Rope
    memory_limit_gib: float | None = None  # None: 60 % of MemAvailable when the run starts


# ------------------------------------------------------------------------------------------------ helpers
def _encoder_options(name: str, length: int) -> dict[str, Any]:
    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:  # a learned table must cover every position of the input
        options["max_len"] = max(int(options["max_len"]), length)
    return options


def _memory_limit(gib: float | None) -> int | None:
    if gib is not None:
        return int(gib * 2**30)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * MEMORY_FRACTION)
    except OSError:
        pass
    return None


def _device(spec: dict[str, Any]) -> str:
    accelerator = spec["device"]["accelerator"]
    if accelerator == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if accelerator in ("gpu", "cuda") else "cpu"


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


def _in_child(fn, *args, timeout: float = CHILD_TIMEOUT_S, **kwargs) -> tuple[Any, int | None, str]:
    """``(result, peak bytes, "ok")`` of ``fn(*args)`` in a forked child, or ``(None, None, "failed: ...")``."""
    try:
        result, peak = peak_memory_in_subprocess(fn, *args, timeout=timeout, **kwargs)
        return result, peak, "ok"
    except RuntimeError as error:
        return None, None, _child_failure(error)


def _skip_reason(name: str, backend: str, length: int, heads: int, device: str, limit: int | None) -> str | None:
    needed = sweep.dense_bytes(length, 1, heads)
    if backend == "sdpa" and "bias" in pet.encoder_info(name).hooks and limit is not None and needed > limit:
        return (f"skipped: the dense bias, mask and scores need >= {needed / 2**30:.1f} GiB, over the "
                f"{limit / 2**30:.1f} GiB cap")
    if backend == "flex" and device == "cpu":
        return "skipped: FlexAttention has no backward on the CPU"
    if backend == "tiled" and name == "cope":
        return "skipped: cope has no pointwise bias (the tiled backend needs one)"
    return None


# ------------------------------------------------------------------------------------------ 1. the layer
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
        return {"timings": {}, "errors": errors}
    results = time_interleaved(steps, warmup=timing["warmup"], repeats=timing["max_repeats"],
                               budget_s=timing["budget_s"], min_repeats=timing["min_repeats"], drop_errors=True)
    errors.update({name: "failed: " + r["error"][:300] for name, r in results.items() if "error" in r})
    return {"timings": {name: r for name, r in results.items() if "error" not in r}, "errors": errors}


def _layer_step(name: str, length: int, batch: int, dim: int, heads: int) -> None:
    import torch

    torch.manual_seed(0)
    make_layer_step(name, length, batch, dim, heads)()


def layer_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``attention_layer`` rows of one length: time (interleaved, failures alone) and memory."""
    names, length, limit = spec["encoders"], spec["length"], _memory_limit(spec["memory_limit_gib"])
    batch, dim, heads = spec["batch"], spec["dim"], spec["heads"]
    shape = (length, batch, dim, heads, spec["timing"])
    timed, _, status = _in_child(time_layers, names, *shape, memory_limit_bytes=limit)
    timed = timed or {"timings": {}, "errors": dict.fromkeys(names, status)}
    timed_with = dict.fromkeys(timed["timings"], f"interleaved with {len(timed['timings'])} encoders")
    for name in [n for n in names if n not in timed["timings"]] if len(names) > 1 else []:
        alone, _, status = _in_child(time_layers, [name], *shape, memory_limit_bytes=limit)
        if alone is not None and name in alone["timings"]:
            timed["timings"][name] = alone["timings"][name]
            timed_with[name] = f"alone (interleaved run: {_short(timed['errors'].pop(name))})"
        else:
            timed["errors"][name] = alone["errors"].get(name, "failed") if alone else status
    rows = []
    for name in names:
        row: dict[str, Any] = dict(kind="attention_layer", encoder=name, hooks=list(pet.encoder_info(name).hooks),
                                   length=length, batch=batch, dim=dim, heads=heads, head_dim=dim // heads,
                                   dtype="float32", causal=True, options=_encoder_options(name, length))
        t = timed["timings"].get(name)
        if t is not None:
            row.update(median_ms=t["median_s"] * 1e3, min_ms=t["min_s"] * 1e3, repeats=t["repeats"],
                       time_status="ok", timed=timed_with[name])
        else:
            row.update(median_ms=None, min_ms=None, repeats=0, time_status=timed["errors"].get(name, "failed"))
        _, peak, status = _in_child(_layer_step, name, length, batch, dim, heads, memory_limit_bytes=limit,
                                    warmup=functools.partial(_layer_step, name, 8, batch, dim, heads))
        row.update(peak_mib=None if peak is None else peak / MIB, memory_status=status)
        rows.append(row)
    return rows


def overhead_rows(rows: list[dict[str, Any]], length: int = 2048) -> list[dict[str, Any]]:
    """Forward + backward time of each encoder over NoPE's at ``length`` (part 1, backend auto)."""
    by_name = {r["encoder"]: r for r in rows if r["length"] == length and r.get("median_ms")}
    if "nope" not in by_name:
        return []
    base = by_name["nope"]["median_ms"]
    return [dict(kind="overhead_vs_nope", encoder=name, length=length, median_ms=r["median_ms"], nope_ms=base,
                 ratio=r["median_ms"] / base) for name, r in by_name.items()]


# --------------------------------------------------------------------------------------- 2. the backends
def backend_train_row(spec: dict[str, Any]) -> dict[str, Any]:
    name, backend, length, dim, heads = spec["encoder"], spec["backend"], spec["length"], spec["dim"], spec["heads"]
    device, limit = _device(spec), _memory_limit(spec["memory_limit_gib"])
    row: dict[str, Any] = dict(kind="backend_train", encoder=name, backend=backend, length=length, batch=1, dim=dim,
                               heads=heads, device=device, dtype="float32")
    skipped = _skip_reason(name, backend, length, heads, device, limit)
    if skipped:
        return {**row, "seconds": None, "peak_mib": None, "status": skipped}
    seconds, peak, status = _in_child(sweep.train_step, name, length, backend, dim, heads, device,
                                      warmup=sweep.warm_train(name, backend, dim, heads, device),
                                      timeout=CHILD_TIMEOUT_S * 3, memory_limit_bytes=limit)
    return {**row, "seconds": seconds, "peak_mib": None if peak is None else peak / MIB, "status": _short(status)}


def backend_infer_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    name, length, dim, heads = spec["encoder"], spec["length"], spec["dim"], spec["heads"]
    device, limit = _device(spec), _memory_limit(spec["memory_limit_gib"])
    rows, samples = [], {}
    for backend in ("sdpa", "blocked", "flex"):
        row: dict[str, Any] = dict(kind="backend_infer", encoder=name, backend=backend, length=length, batch=1,
                                   dim=dim, heads=heads, device=device, dtype="float32")
        result, peak, status = _in_child(sweep.infer, name, length, backend, dim, heads, device,
                                         warmup=sweep.warm_infer(name, length, backend, dim, heads, device),
                                         memory_limit_bytes=limit)
        if result is not None:
            samples[backend] = result["sample"]
            row.update(median_ms=result["median_s"] * 1e3, peak_mib=peak / MIB, status="ok")
        else:
            row.update(median_ms=None, peak_mib=None, status=_short(status))
        rows.append(row)
    for row in rows:
        if "sdpa" in samples and row["backend"] in samples:
            row["max_abs_diff_vs_sdpa"] = max(abs(a - b) for a, b in zip(samples[row["backend"]], samples["sdpa"]))
    dense, flex = rows[0], rows[2]
    if flex["status"] == "ok" and dense["status"] == "ok":
        flex["speedup_vs_sdpa"] = dense["median_ms"] / flex["median_ms"]
        flex["memory_ratio_vs_sdpa"] = dense["peak_mib"] / max(flex["peak_mib"], 1e-9)
    return rows


def compiled_row(spec: dict[str, Any]) -> dict[str, Any]:
    name, length, dim, heads, rounds = spec["encoder"], spec["length"], spec["dim"], spec["heads"], spec["rounds"]
    device = _device(spec)
    row: dict[str, Any] = dict(kind="compiled_vs_eager", encoder=name, backend="sdpa", length=length, batch=1,
                               dim=dim, heads=heads, device=device, dtype="float32", compiler="inductor",
                               rounds=rounds)
    result, _, status = _in_child(sweep.compiled_vs_eager, name, length, dim, heads, device, rounds,
                                  memory_limit_bytes=_memory_limit(spec["memory_limit_gib"]))
    if result is None:
        return {**row, "status": _short(status)}
    return {**row, "eager_ms": result["eager_s"] * 1e3, "compiled_ms": result["compiled_s"] * 1e3,
            "speedup": result["eager_s"] / result["compiled_s"], "first_call_s": result["first_call_s"],
            "max_abs_diff_out": result["max_abs_diff_out"], "max_abs_diff_grad": result["max_abs_diff_grad"],
            "status": "ok"}


def backend_overhead_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Forward + backward of every (encoder, backend) over NoPE's SDPA at one length, in one child."""
    length, dim, heads = spec["length"], spec["dim"], spec["heads"]
    device, limit = _device(spec), _memory_limit(spec["memory_limit_gib"])
    configs, skipped = [], {}
    for name in spec["encoders"]:
        for backend in [*spec["backends"], "auto"]:
            reason = _skip_reason(name, backend, length, heads, device, limit)
            if reason:
                skipped[(name, backend)] = reason
            else:
                configs.append((name, backend))
    result, _, status = _in_child(sweep.overhead_vs_nope, configs, length, dim, heads, device, spec["rounds"],
                                  spec["budget_s"], timeout=CHILD_TIMEOUT_S * 4, memory_limit_bytes=limit)
    result = result or {"errors": {f"{n}/{b}": status for n, b in configs}, "first_call_s": {}, "times_s": {},
                        "ratios": {}}
    base = sorted(result["times_s"].get("nope/sdpa", []))
    rows = []
    for name, backend in [("nope", "sdpa"), *configs, *skipped]:
        key = f"{name}/{backend}"
        row: dict[str, Any] = dict(kind="backend_overhead", encoder=name, backend=backend, length=length, batch=1,
                                   dim=dim, heads=heads, device=device, dtype="float32")
        if key in result["ratios"]:
            times = sorted(result["times_s"][key])
            row.update(ratio_vs_nope_sdpa=result["ratios"][key], median_ms=times[len(times) // 2] * 1e3,
                       nope_sdpa_ms=base[len(base) // 2] * 1e3, rounds=len(times),
                       first_call_s=result["first_call_s"][key], status="ok")
        else:
            row.update(ratio_vs_nope_sdpa=None, status=skipped.get((name, backend))
                       or _short("failed: " + result["errors"].get(key, "not measured")))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- 3. RoPE application
def _optional(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        return error


def _reference_ropes(q, k, length: int) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The other libraries' RoPE application on q and k (``{name: implementation}``), and rows for the missing."""
    from importlib.metadata import version as dist_version

    import torch

    batch, heads, _, head_dim = q.shape
    impls, missing = {}, []
    llama = _optional("transformers.models.llama.modeling_llama")
    if isinstance(llama, ImportError):
        missing.append(dict(implementation="transformers", library="transformers", detail=_error_text(llama)))
    else:
        config = llama.LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                                   num_key_value_heads=heads, max_position_embeddings=length, rope_theta=10_000.0)
        hf_cos, hf_sin = llama.LlamaRotaryEmbedding(config)(q, torch.arange(length).expand(batch, length))
        impls["transformers"] = dict(
            fn=lambda: llama.apply_rotary_pos_emb(q, k, hf_cos, hf_sin), layout="half-split",
            library="transformers", version=dist_version("transformers"),
            what="apply_rotary_pos_emb(q, k, cos, sin); cos/sin (B, L, hd) from LlamaRotaryEmbedding")
    ret = _optional("rotary_embedding_torch")
    if isinstance(ret, ImportError):
        missing.append(dict(implementation="rotary-embedding-torch", library="rotary-embedding-torch",
                            detail=_error_text(ret)))
    else:
        rotary, version = ret.RotaryEmbedding(dim=head_dim), dist_version("rotary-embedding-torch")
        freqs = rotary(torch.arange(length, dtype=torch.float32), seq_len=length)  # (L, hd)
        impls["rotary-embedding-torch"] = dict(
            fn=lambda: (rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)), layout="interleaved",
            library="rotary-embedding-torch", version=version,
            what="RotaryEmbedding(dim=hd).rotate_queries_or_keys on q and k (frequencies cached by it)")
        impls["rotary-embedding-torch apply"] = dict(
            fn=lambda: (ret.apply_rotary_emb(freqs, q), ret.apply_rotary_emb(freqs, k)), layout="interleaved",
            library="rotary-embedding-torch", version=version,
            what="apply_rotary_emb(freqs, t) on q and k, freqs (L, hd) precomputed")
    xt = _optional("x_transformers.x_transformers")
    if isinstance(xt, ImportError):
        missing.append(dict(implementation="x-transformers", library="x-transformers", detail=_error_text(xt)))
    else:
        xt_freqs, xt_scale = xt.RotaryEmbedding(head_dim).forward_from_seq_len(length)  # (1, L, hd), 1.0
        impls["x-transformers"] = dict(
            fn=lambda: (xt.apply_rotary_pos_emb(q, xt_freqs, xt_scale), xt.apply_rotary_pos_emb(k, xt_freqs, xt_scale)),
            layout="interleaved", library="x-transformers", version=dist_version("x-transformers"),
            what="apply_rotary_pos_emb(t, freqs) on q and k, freqs (1, L, hd) from RotaryEmbedding")
    return impls, [{**m, "status": "not installed"} for m in missing]


def rope_application(batch: int, heads: int, length: int, head_dim: int, timing: dict) -> list[dict]:
    """Child: time our apply_rope against the other libraries' RoPE application on q and k."""
    import torch

    from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope

    torch.manual_seed(0)
    q, k = torch.randn(batch, heads, length, head_dim), torch.randn(batch, heads, length, head_dim)
    cos, sin = RotaryEncoding(heads * head_dim, heads).cos_sin(torch.arange(length), torch.float32)  # (L, hd/2)

    def ours(interleaved: bool):
        return lambda: tuple(apply_rope(t, cos, sin, interleaved=interleaved) for t in (q, k))

    impls = {
        "ours": dict(fn=ours(False), layout="half-split", library="pe_toolkit", version=pet.__version__,
                     what="apply_rope(q, cos, sin), apply_rope(k, cos, sin); cos/sin (L, hd/2) cached"),
        "ours-interleaved": dict(fn=ours(True), layout="interleaved", library="pe_toolkit", version=pet.__version__,
                                 what="apply_rope(..., interleaved=True) on q and k"),
    }
    others, missing = _reference_ropes(q, k, length)
    impls.update(others)
    reference = {"half-split": impls["ours"]["fn"](), "interleaved": impls["ours-interleaved"]["fn"]()}
    for impl in impls.values():  # the same computation? every output against ours in the same layout
        impl["max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(impl["fn"](), reference[impl["layout"]]))
    timings = time_interleaved({n: i["fn"] for n, i in impls.items()}, warmup=timing["warmup"],
                               repeats=timing["max_repeats"], budget_s=timing["budget_s"],
                               min_repeats=timing["min_repeats"])
    shape = dict(batch=batch, heads=heads, length=length, head_dim=head_dim, dtype="float32")
    rows = []
    for name, impl in impls.items():
        t = timings[name]
        same = "ours" if impl["layout"] == "half-split" else "ours-interleaved"
        vs_ours = paired_ratios(t["times_s"], timings["ours"]["times_s"])
        rows.append(dict(
            implementation=name, library=impl["library"], version=impl["version"], layout=impl["layout"],
            what=impl["what"], **shape, median_ms=t["median_s"] * 1e3, min_ms=t["min_s"] * 1e3,
            repeats=t["repeats"], max_abs_diff_vs_ours=impl["max_abs_diff"], status="ok",
            ratio_vs_ours=vs_ours["ratio_median"], ratio_vs_ours_p25=vs_ours["ratio_p25"],
            ratio_vs_ours_p75=vs_ours["ratio_p75"],
            ratio_vs_same_layout=paired_ratios(t["times_s"], timings[same]["times_s"])["ratio_median"],
            same_layout_reference=same))
    return rows + [{**m, **shape} for m in missing]


def rope_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    b, h, length, hd = spec["shape"]
    rows, _, status = _in_child(rope_application, b, h, length, hd, spec["timing"],
                                memory_limit_bytes=_memory_limit(spec["memory_limit_gib"]))
    if rows is None:
        rows = [dict(implementation="all", library="n/a", batch=b, heads=h, length=length, head_dim=hd,
                     dtype="float32", status=status)]
    return [{**r, "kind": "rope_application"} for r in rows]


# ------------------------------------------------------------------------------------------------ report
def _fmt_ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _alone(row: dict[str, Any]) -> bool:
    return str(row.get("timed", "")).startswith("alone")


def _by_length(rows: list[dict], cell, columns: list, prefix: str, header: str) -> str:
    """A table of one line per (encoder[, backend]) and one column per length; ``cell(row)`` fills it."""
    lengths = sorted({r["length"] for r in rows})
    table: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        entry = table.setdefault(tuple(r.get(c) for c in columns), {c: r.get(c) for c in columns})
        entry.update({f"{prefix}{k}{r['length']}": v for k, v in cell(r).items()})
    heads = [(f"{prefix}{k}{L}", head.format(L=L)) for k, head in header for L in lengths]
    return markdown_table(table.values(), [*columns, *heads])


def layer_tables(rows: list[dict[str, Any]]) -> str:
    def time_cell(r):
        ms = r.get("median_ms")
        return {"t": _fmt_ms(ms) + (" (alone)" if _alone(r) else "") if ms is not None else _short(r["time_status"]),
                "m": f"{r['peak_mib']:.1f}" if r.get("peak_mib") is not None else _short(r["memory_status"])}

    shown = [{**r, "hooks": ", ".join(r["hooks"]) or "none"} for r in rows]
    note = ("\n(alone): failed when interleaved with the other encoders, timed in a process of its own.\n"
            if any(map(_alone, rows)) else "")
    return ("### Forward + backward time (median ms)\n\n" + _by_length(shown, time_cell, ["encoder", "hooks"], "",
                                                                       [("t", "L={L} ms")])
            + note + "\n### Peak memory (MiB of RSS growth in a fresh forked process)\n\n"
            + _by_length(shown, time_cell, ["encoder"], "", [("m", "L={L} MiB")]))


def backend_tables(train, infer, overhead, compiled, backend_overhead) -> str:
    parts = []
    if train:
        parts.append("### Training step per backend (forward + backward: seconds / peak MiB)\n\n" + _by_length(
            train, lambda r: {"": f"{r['seconds']:.2f} s / {r['peak_mib']:.0f} MiB" if r["status"] == "ok"
                              else r["status"].split(":")[0]}, ["encoder", "backend"], "L", [("", "L={L}")]))
        parts += [f"* {s}" for s in sorted({r["status"] for r in train if r["status"] != "ok"})]
    if infer:
        parts.append(f"\n### Inference, forward only, L={infer[0]['length']}\n\n" + markdown_table(
            infer, ["encoder", "backend", ("median_ms", "median ms"), ("peak_mib", "peak MiB"),
                    ("speedup_vs_sdpa", "sdpa / flex time"), ("memory_ratio_vs_sdpa", "sdpa / flex memory"),
                    ("max_abs_diff_vs_sdpa", "max abs diff vs sdpa"), "status"],
            {"median_ms": ".1f", "peak_mib": ".0f", "speedup_vs_sdpa": ".2f", "memory_ratio_vs_sdpa": ".1f",
             "max_abs_diff_vs_sdpa": ".1e"}))
    if overhead:
        parts.append(f"### Overhead against NoPE, L={overhead[0]['length']}, forward + backward, backend auto\n\n"
                     + markdown_table(overhead, ["encoder", ("median_ms", "median ms"), ("ratio", "/ NoPE")],
                                      {"median_ms": ".1f", "ratio": ".2f"}))
    if compiled:
        parts.append(f"### Compiled against eager, L={compiled[0]['length']}, forward + backward, backend sdpa\n\n"
                     "`torch.compile(layer, fullgraph=True)` (inductor); medians over interleaved rounds after the "
                     "first compiled call, which compiles and is timed on its own.\n\n" + markdown_table(
                         compiled, ["encoder", ("eager_ms", "eager ms"), ("compiled_ms", "compiled ms"),
                                    ("speedup", "eager / compiled"), ("first_call_s", "first call s"),
                                    ("max_abs_diff_out", "max abs diff out"),
                                    ("max_abs_diff_grad", "max abs diff grad"), "status"],
                         {"eager_ms": ".1f", "compiled_ms": ".1f", "speedup": ".2f", "first_call_s": ".1f",
                          "max_abs_diff_out": ".1e", "max_abs_diff_grad": ".1e"}))
    if backend_overhead:
        rounds = ", ".join(f"L={L}: {max(r.get('rounds', 0) for r in backend_overhead if r['length'] == L)}"
                           for L in sorted({r["length"] for r in backend_overhead}))

        def cell(r):
            if r["status"] != "ok":
                return {"L": r["status"].split(":")[0]}
            return {"L": f"{r['ratio_vs_nope_sdpa']:.2f}x ({r['median_ms']:.0f} ms)", "f": f"{r['first_call_s']:.1f}"}

        parts.append(
            "\n### Forward + backward against NoPE's SDPA, per backend (interleaved rounds in one process)\n\n"
            "Per round, each configuration's step over NoPE's SDPA step of the same round; median over the rounds "
            f"({rounds}); in brackets the median step. `first call s`: the first step of each configuration in "
            "its process (the tiled backend compiles its tile steps there; other backends load their code "
            "paths). `auto` is what `backend=\"auto\"` chose.\n\n"
            + _by_length(backend_overhead, cell, ["encoder", "backend"], "",
                         [("L", "L={L}"), ("f", "first call s, L={L}")]))
    return "\n".join(parts)


def rope_table(rows: list[dict[str, Any]]) -> str:
    shown = [{**r, "ratio_iqr": f"{r['ratio_vs_ours_p25']:.2f} to {r['ratio_vs_ours_p75']:.2f}"}
             if "ratio_vs_ours_p25" in r else r for r in rows]
    r0 = rows[0]
    return (f"\n### RoPE application, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} "
            f"head_dim={r0['head_dim']} float32\n\n"
            "`theirs / ours`: per-round ratio of this implementation's time to ours (`apply_rope`, half-split, "
            "cos/sin `(L, hd/2)` from the encoder cache), median and interquartile range over "
            f"{r0.get('repeats', 0)} interleaved rounds; above 1 means ours is faster. `same layout` compares "
            "interleaved libraries with `apply_rope(..., interleaved=True)`. `max abs diff`: largest difference of "
            "the outputs from ours in the same layout.\n\n"
            + markdown_table(shown, ["implementation", "layout", ("median_ms", "median ms"), ("min_ms", "min ms"),
                                     ("ratio_vs_ours", "theirs / ours"), ("ratio_iqr", "IQR of ratio"),
                                     ("ratio_vs_same_layout", "theirs / ours same layout"),
                                     ("max_abs_diff_vs_ours", "max abs diff"), "status"],
                             {"median_ms": ".2f", "min_ms": ".2f", "ratio_vs_ours": ".2f",
                              "ratio_vs_same_layout": ".2f", "max_abs_diff_vs_ours": ".1e"})
            + "\n" + "\n".join(f"* `{r['implementation']}` ({r['library']} {r.get('version', '')}): {r['what']}"
                               if r["status"] == "ok" else f"* `{r['implementation']}`: {r['status']}" for r in rows))


# ------------------------------------------------------------------------------------------------- plots
def _figure(size=(8, 5.5)):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def lines_vs_length(ax, series: dict[tuple[str, Any, int], list[tuple[int, float]]], what: str, ylabel: str,
                    title: str) -> None:
    """One line per ``(label, linestyle, colour index)`` over the sequence length, log-log; empty: a note."""
    markers = "os^vD<>phx*+1234"
    for (label, style, i), points in series.items():
        if points:
            ax.plot(*zip(*sorted(points)), linestyle=style, marker=markers[i % len(markers)], color=f"C{i % 10}",
                    label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    empty = note_if_empty(ax, what, reason="no configuration was measured in this run")
    ax.set(xlabel="sequence length L", ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    if not empty:
        ax.legend(fontsize=7, ncol=2)


def _series(rows, value: str, styles: dict[str, Any] | None = None) -> dict:
    """``{(label, style, colour): [(length, value)]}`` of the measured rows, per encoder (and backend)."""
    encoders = list(dict.fromkeys(r["encoder"] for r in rows))
    if styles is None:  # one line per encoder
        return {(n, "-" if i < 10 else "--", i): [(r["length"], r[value]) for r in rows
                                                  if r["encoder"] == n and r.get(value)]
                for i, n in enumerate(encoders)}
    return {(f"{n} {b}", style, i): [(r["length"], r[value]) for r in rows
                                     if r["encoder"] == n and r["backend"] == b and r.get(value)]
            for i, n in enumerate(encoders) for b, style in styles.items()}


def plot_layer(rows: list[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5))
    lines_vs_length(ax_t, _series(rows, "median_ms"), "time", "forward + backward, median ms",
                    "one causal attention layer, time")
    lines_vs_length(ax_m, _series(rows, "peak_mib"), "peak memory", "peak RSS growth, MiB",
                    "one causal attention layer, memory")
    fig.tight_layout()
    return fig


def plot_rope(rows: list[dict[str, Any]]):
    measured = [r for r in rows if r["status"] == "ok"]
    fig, ax = _figure((8, 0.5 * len(measured) + 1.5))
    ax.barh([r["implementation"] for r in measured], [r["median_ms"] for r in measured],
            color=["C0" if r["library"] == "pe_toolkit" else "C1" for r in measured])
    ax.invert_yaxis()
    r0 = measured[0]
    ax.set(title="RoPE application", xlabel=f"median ms, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} "
                                            f"hd={r0['head_dim']} fp32")
    fig.tight_layout()
    return fig


def plot_backend_memory(rows: list[dict[str, Any]]):
    fig, ax = _figure()
    lines_vs_length(ax, _series([r for r in rows if r["status"] == "ok"], "peak_mib",
                                {"sdpa": "--", "blocked": "-", "flex": ":"}), "peak memory",
                    "peak RSS growth, MiB (one layer, forward + backward)",
                    "Training memory per backend (dashed: dense sdpa, solid: blocked)")
    fig.tight_layout()
    return fig


def plot_backend_overhead(rows: list[dict[str, Any]]):
    fig, ax = _figure()
    ax.axhline(1.0, color="black", linewidth=0.8)
    measured = [r for r in rows if r["status"] == "ok" and r["encoder"] != "nope"]
    lines_vs_length(ax, _series(measured, "ratio_vs_nope_sdpa", {"sdpa": "--", "blocked": "-.", "tiled": "-",
                                                                 "flex": ":", "auto": (0, (1, 3))}),
                    "overhead", "forward + backward time / NoPE SDPA (median of per-round ratios)",
                    "Overhead against NoPE per backend (solid: tiled, dashed: sdpa, dash-dot: blocked)")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------- benchmark
PARTS = {"attention_layers": layer_rows, "backend_train": backend_train_row, "backend_inference": backend_infer_rows,
         "compiled_vs_eager": compiled_row, "backend_overheads": backend_overhead_rows, "rope_applications": rope_rows}
"""Run kind -> what measures it: one row, or a list of rows (kept in the run's ``rows``)."""


def _measured(result: Result, kind: str) -> list[dict[str, Any]]:
    return [r for r in result.derived if r["kind"] == kind]


def _plots(result: Result) -> dict[str, tuple[Any, list[dict[str, Any]]]]:
    """``{file name: (draw, rows)}`` of the plots this result has data for."""
    rope = _measured(result, "rope_application")
    train = [r for r in result.rows if r["kind"] == "backend_train"]
    overhead = _measured(result, "backend_overhead")
    plots = {"layer_time_memory_vs_length.png": (plot_layer, _measured(result, "attention_layer"))}
    if any(r["status"] == "ok" for r in rope):
        plots["rope_application.png"] = (plot_rope, rope)
    if train:
        plots["backend_memory_vs_length.png"] = (plot_backend_memory, train)
    if overhead:
        plots["overhead_vs_length.png"] = (plot_backend_overhead, overhead)
    return plots


class Speed(Benchmark):
    name = "speed"
    title = "Speed: attention layer per encoder and RoPE application"
    description = ("time and memory of one attention layer per encoder and backend, torch.compile, and RoPE "
                   "application against transformers / rotary-embedding-torch / x-transformers")
    Config = Config
    key_fields = ("kind", "encoder", "backend", "length")
    exclusive = True  # timings: never run next to another run

    def check(self, config: Config) -> None:
        available = pet.list_encoders(domain="sequence")
        b = config.backends
        for key, names in (("layer.encoders", config.layer.encoders), ("backends.encoders", b.encoders),
                           ("backends.infer_encoders", b.infer_encoders),
                           ("backends.compile_encoders", b.compile_encoders),
                           ("backends.overhead_encoders", b.overhead_encoders)):
            unknown = [n for n in names if n not in available]
            if unknown:
                raise ValueError(f"{key}: unknown encoder(s) {unknown}; sequence encoders: {', '.join(available)}")
        wrong = [n for n in b.backends if n not in BACKENDS]
        if wrong:
            raise ValueError(f"backends.backends: unknown backend(s) {wrong}; allowed: {list(BACKENDS)}")
        positive = {"layer.lengths": config.layer.lengths, "backends.lengths": b.lengths,
                    "backends.overhead_lengths": b.overhead_lengths, "rope.shape": config.rope.shape,
                    "layer.batch/dim/heads": [config.layer.batch, config.layer.dim, config.layer.heads],
                    "backends.infer_length/compile_length/compile_rounds/overhead_rounds":
                        [b.infer_length, b.compile_length, b.compile_rounds, b.overhead_rounds]}
        for key, values in positive.items():
            if any(v < 1 for v in values):
                raise ValueError(f"{key} must be positive, got {values}")
        if config.layer.dim % config.layer.heads:
            raise ValueError(f"layer.heads ({config.layer.heads}) must divide layer.dim ({config.layer.dim})")
        if len(config.rope.shape) != 4 or config.rope.shape[3] % 2:
            raise ValueError(f"rope.shape must be [B, H, L, head_dim] with an even head_dim, got {config.rope.shape}")
        for key, t in (("layer.timing", config.layer.timing), ("rope.timing", config.rope.timing)):
            if not 1 <= t.min_repeats <= t.max_repeats or t.warmup < 0:
                raise ValueError(f"{key}: need 1 <= min_repeats <= max_repeats and warmup >= 0, got {t}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        layer, b = config.layer, config.backends
        common = {"dim": layer.dim, "heads": layer.heads, "memory_limit_gib": config.memory_limit_gib}
        encoders = layer.encoders or pet.list_encoders(domain="sequence")
        specs = [{"kind": "attention_layers", "encoder": "all", "backend": "auto", "length": length, **common,
                  "encoders": encoders, "batch": layer.batch, "timing": dataclasses.asdict(layer.timing)}
                 for length in layer.lengths]
        if b.enabled:
            specs += [{"kind": "backend_train", "encoder": n, "backend": k, "length": length, **common}
                      for length in b.lengths for n in b.encoders for k in b.backends]
            specs += [{"kind": "backend_inference", "encoder": n, "backend": "sdpa+blocked+flex",
                       "length": b.infer_length, **common} for n in b.infer_encoders]
            specs += [{"kind": "compiled_vs_eager", "encoder": n, "backend": "sdpa", "length": b.compile_length,
                       "rounds": b.compile_rounds, **common} for n in b.compile_encoders]
            specs += [{"kind": "backend_overheads", "encoder": "all", "backend": "all", "length": length, **common,
                       "encoders": b.overhead_encoders, "backends": b.backends, "rounds": b.overhead_rounds,
                       "budget_s": b.overhead_budget_s} for length in b.overhead_lengths]
        if config.rope.enabled:
            specs.append({"kind": "rope_applications", "encoder": "rope", "backend": "-",
                          "length": config.rope.shape[2], "shape": config.rope.shape,
                          "timing": dataclasses.asdict(config.rope.timing),
                          "memory_limit_gib": config.memory_limit_gib})
        return specs

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        measured = PARTS[spec["kind"]](spec)
        if isinstance(measured, dict):
            return measured
        return {key: spec[key] for key in self.key_fields} | {"rows": measured}

    def progress_label(self, row: dict[str, Any]) -> str:
        shown = row.get("rows", [row])
        statuses = [r.get("status", r.get("time_status")) for r in shown]
        return (f"{row['kind']} {row['encoder']} {row['backend']} L={row['length']}: "
                f"{statuses.count('ok')} of {len(statuses)} ok")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        """The measured rows of every run (a run of several configurations holds them in ``rows``)."""
        flat = [r for run in result.rows for r in run.get("rows", [])]
        return flat + overhead_rows([r for r in flat if r["kind"] == "attention_layer"])

    def plot(self, result: Result) -> dict[str, Any]:
        return {name: draw(rows) for name, (draw, rows) in _plots(result).items()}

    def report(self, result: Result) -> str:
        config, layer = result.config, _measured(result, "attention_layer")
        c, t = config.layer, config.layer.timing
        limit = _memory_limit(config.memory_limit_gib)
        rounds = (f"new rounds start until {t.budget_s:.0f} s are spent, {t.min_repeats} to {t.max_repeats} rounds"
                  if t.budget_s is not None else f"{t.max_repeats} rounds")
        body = [
            f"One causal `MultiHeadAttention(dim={c.dim}, num_heads={c.heads})` layer (head_dim {c.dim // c.heads}), "
            f"batch {c.batch}, float32, forward + backward (`attn(enc.embed(x, pos)).sum().backward()`, input "
            "requiring grad), each encoder built with its registry `example_options` (learned: `max_len` raised to "
            "L); torch threads per run: `threads` in results.json's config (`--threads`). Time: median over the "
            f"rounds (all encoders of one L interleaved in one forked process, after one warm-up call each; {rounds}). "
            "Memory: peak RSS growth of a fresh forked process that builds the layer and input and runs one step "
            "(after a tiny L=8 step that loads the code paths)."
            + (f" Each forked process may grow by at most {limit / 2**30:.1f} GiB of address space "
               "(`memory_limit_gib`); a configuration above it is reported as failed (out of memory).\n"
               if limit is not None else "\n"),
            "Rounds used per length: " + ", ".join(
                f"L={L}: {next((r['repeats'] for r in layer if r['length'] == L and r['repeats']), 0)}"
                for L in c.lengths) + ".\n",
            layer_tables(layer) if layer else "",
        ]
        failures = [f"* {r['encoder']} L={r['length']} {what}: {r[key]}" for r in layer
                    for key, what in (("time_status", "time"), ("memory_status", "memory")) if r[key] != "ok"]
        if failures:
            body.append("\nFailed configurations (not measured):\n\n" + "\n".join(failures) + "\n")
        alone = [f"* {r['encoder']} L={r['length']}: timed {r['timed']}, {r['repeats']} rounds"
                 for r in layer if _alone(r)]
        if alone:
            body.append("\nTimed in a process of their own:\n\n" + "\n".join(alone) + "\n")
        train = [r for r in result.rows if r["kind"] == "backend_train"]
        compiled = [r for r in result.rows if r["kind"] == "compiled_vs_eager"]
        parts = (train, _measured(result, "backend_infer"), _measured(result, "overhead_vs_nope"), compiled,
                 _measured(result, "backend_overhead"))
        if any(parts):
            on_gpu = any(r.get("device") == "cuda" for part in parts for r in part)
            body += ["\n## Attention backends\n", sweep.__doc__.split("\n\n", 1)[1].strip() + "\n",
                     "GPU rows: " + ("measured on CUDA.\n" if on_gpu else "not measured (no GPU in this run).\n"),
                     backend_tables(*parts)]
        rope = _measured(result, "rope_application")
        if rope:
            body.append(rope_table(rope))
        body.append("\nPlots: " + ", ".join(f"![{name[:-4]}]({name})" for name in _plots(result)))
        body.append(f"\nTotal wall time: {result.seconds:.1f} s on {os.cpu_count()} CPUs; the load average is in "
                    "results.json's environment (more than this benchmark's threads means other work shared the "
                    "CPUs and slowed the timings).")
        return "\n".join(body)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="speed", prog="python benchmarks/speed.py"))
