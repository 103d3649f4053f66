"""Speed: one attention layer per encoder, the attention backends, and RoPE application against other libraries.

1. ``layer``: forward + backward of one causal ``MultiHeadAttention`` per sequence encoder and length, every encoder
   of one length timed in interleaved rounds in one child; memory from a fresh child per configuration.
2. ``backends``: per encoder, backend and length a training step (time, peak memory); inference with sdpa / blocked
   / flex; ``torch.compile`` against eager; forward + backward against NoPE's SDPA per backend (interleaved). These
   run on ``--accelerator`` (``auto``: CUDA when there is one), the others on the CPU.
3. ``rope``: our ``apply_rope`` against HF transformers, rotary-embedding-torch and x-transformers (each checked
   against ours, then timed interleaved); a library that is not installed: "not installed".

Every measurement runs in a forked child, one at a time (``exclusive``), on :mod:`pe_toolkit.bench.timing`'s clock.
Needs only the core and the ``plot`` extra; the libraries of part 3 are optional.

    pe-toolkit bench speed --quick                     # = --preset quick: a pipeline check
    pe-toolkit bench speed --set layer.encoders=[rope,alibi] --set layer.lengths=[512]
    pe-toolkit bench speed --preset gpu --accelerator cuda
    python benchmarks/speed.py --quick                 # the same code
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from typing import Any, Literal

import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

import pe_toolkit as pet
from pe_toolkit.bench import Benchmark, Result
from pe_toolkit.bench.memory import memory_cap_bytes, run_in_child
from pe_toolkit.bench.plots import finish, new_figure
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.timing import clock, compiled_vs_eager, paired_ratios, time_interleaved

CHILD_TIMEOUT_S = 1800.0
Encoder = Literal[tuple(pet.list_encoders(domain="sequence"))]
Backend = Literal["sdpa", "blocked", "tiled", "flex"]


@dataclasses.dataclass
class Timing:  # rounds: new ones start until budget_s is spent (None: exactly max_repeats)
    budget_s: NonNegativeFloat | None
    min_repeats: PositiveInt
    max_repeats: PositiveInt
    warmup: NonNegativeInt = 0


@dataclasses.dataclass
class Layer:
    lengths: list[PositiveInt]
    timing: Timing
    encoders: list[Encoder] = dataclasses.field(default_factory=list)  # empty: every sequence encoder
    batch: PositiveInt = 1
    dim: PositiveInt = 256
    heads: PositiveInt = 4


@dataclasses.dataclass
class Backends:
    enabled: bool
    backends: list[Backend]
    lengths: list[PositiveInt]
    encoders: list[Encoder]
    infer_length: PositiveInt
    infer_encoders: list[Encoder]
    compile_length: PositiveInt
    compile_encoders: list[Encoder]
    compile_rounds: PositiveInt
    overhead_lengths: list[PositiveInt]
    overhead_encoders: list[Encoder]
    overhead_rounds: PositiveInt
    overhead_budget_s: NonNegativeFloat | None


@dataclasses.dataclass
class Rope:
    enabled: bool
    shape: list[PositiveInt]  # B, H, L, head_dim
    timing: Timing


@dataclasses.dataclass
class Config:
    layer: Layer
    backends: Backends
    rope: Rope
    memory_limit_gib: PositiveFloat | None = None  # None: 60 % of MemAvailable when the run starts


# ------------------------------------------------------------------------------------------------ helpers
def encoder_options(name: str, length: int) -> dict[str, Any]:
    """The registry's example options of ``name``; a learned table's ``max_len`` raised to cover ``length``."""
    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:
        options["max_len"] = max(int(options["max_len"]), length)
    return options


def attention(name: str, length: int, dim: int, heads: int, options: dict[str, Any] | None = None, **layer_options):
    """``(encoding, layer)``: a causal layer with encoder ``name`` (its ``options`` over :func:`encoder_options`); one
    with only an embed hook acts on the input (``layer(encoding.embed(x, positions))``), the layer is then NoPE."""
    encoding = pet.get_encoder(name, dim, heads, **encoder_options(name, length) | (options or {}))
    return encoding, pet.MultiHeadAttention(dim, heads, causal=True, **layer_options,
                                            encoding=encoding if encoding.acts_in_attention else None)


def _device(spec: dict[str, Any]) -> str:
    accelerator = spec["device"]["accelerator"]
    return "cuda" if accelerator in ("gpu", "cuda") or accelerator == "auto" and torch.cuda.is_available() else "cpu"


def _short(status: str) -> str:
    """A status short enough for a table cell: out-of-memory errors become 'out of memory'."""
    if "can't allocate memory" in status or "MemoryError" in status or "out-of-memory" in status:
        return "failed: out of memory"
    return status if len(status) <= 80 else status[:77] + "..."


def _measure(spec, fn, *args, timeout: float = CHILD_TIMEOUT_S, **options) -> tuple[Any, float | None, str]:
    """``(result, peak MiB, "ok")`` of ``fn(*args)`` in a forked child (memory capped by ``spec``), or
    ``(None, None, "failed: ...")``."""
    result, peak, error = run_in_child(fn, *args, timeout=timeout, **options,
                                       memory_limit_bytes=memory_cap_bytes(spec["memory_limit_gib"]))
    return result, None if peak is None else peak / 2**20, "ok" if error is None else ("failed: " + error)[:300]


def _interleaved(fns: dict[str, Any], timing: dict[str, Any], **options) -> dict[str, dict[str, Any]]:
    return time_interleaved(fns, warmup=timing["warmup"], repeats=timing["max_repeats"], budget_s=timing["budget_s"],
                            min_repeats=timing["min_repeats"], **options)


def _row(spec: dict[str, Any], kind: str, backend: str, **fields: Any) -> dict[str, Any]:
    return dict(kind=kind, encoder=spec["encoder"], backend=backend, length=spec["length"], batch=1, dim=spec["dim"],
                heads=spec["heads"], device=_device(spec), dtype="float32", **fields)


# ------------------------------------------------------------------------ the layers (parts 1 and 2's overhead)
def time_steps(configs: list[tuple[str, str]], length: int, batch: int, dim: int, heads: int, device: str,
               timing: dict | None) -> dict[str, Any]:
    """Child: forward + backward of each ``(encoder, backend)`` layer on one input of ``length``: a first call each
    (checks that it runs; the tiled backend compiles its tile steps there), then (``timing``) interleaved rounds.

    Returns ``{"first_s", "timed", "errors"}``, each keyed by ``"encoder/backend"``; errors read "failed: ...".
    """
    torch.manual_seed(0)
    x = torch.randn(batch, length, dim, device=device, requires_grad=True)
    positions, steps, first, errors = torch.arange(length, device=device), {}, {}, {}
    for name, backend in configs:
        key = f"{name}/{backend}"
        try:
            encoding, layer = attention(name, length, dim, heads, backend=backend)
            encoding, layer = encoding.to(device), layer.to(device)

            def step(layer=layer, encoding=encoding) -> None:
                layer.zero_grad(set_to_none=True)
                x.grad = None
                layer(encoding.embed(x, positions)).sum().backward()

            start = clock()
            step()
            first[key], steps[key] = clock() - start, step
        except Exception as error:  # noqa: BLE001  (record the failure, keep the others)
            errors[key] = "failed: " + (f"{type(error).__name__}: {error}".strip().splitlines() or ["?"])[0][:300]
    timed = _interleaved(steps, timing, drop_errors=True) if steps and timing else {}
    errors.update({key: "failed: " + t["error"][:300] for key, t in timed.items() if "error" in t})
    return {"first_s": first, "timed": {key: t for key, t in timed.items() if "error" not in t}, "errors": errors}


def one_step(spec, name: str, backend: str, batch: int, device: str, *, warmup_length: int,
             **options) -> tuple[float | None, float | None, str]:
    """``(seconds, peak MiB, status)`` of one step in a fresh child, after a step at ``warmup_length`` that loads the
    code paths (its memory not counted)."""
    key, shape = f"{name}/{backend}", (batch, spec["dim"], spec["heads"], device, None)
    warmup = functools.partial(time_steps, [(name, backend)], warmup_length, *shape)
    result, peak, status = _measure(spec, time_steps, [(name, backend)], spec["length"], *shape, warmup=warmup,
                                    **options)
    if result and key in result["errors"]:
        return None, None, result["errors"][key]
    return result and result["first_s"][key], peak, status


def layer_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``attention_layer`` rows of one length: time (interleaved; a failure there alone) and memory."""
    names, length, batch, dim, heads = (spec[k] for k in ("encoders", "length", "batch", "dim", "heads"))

    def timed(names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
        result, _, status = _measure(spec, time_steps, [(n, "auto") for n in names], length, batch, dim, heads,
                                     "cpu", spec["timing"])
        if result is None:
            return {}, dict.fromkeys(names, status)
        return tuple({k.removesuffix("/auto"): v for k, v in result[part].items()} for part in ("timed", "errors"))

    timings, errors = timed(names)
    timed_with = dict.fromkeys(timings, f"interleaved with {len(timings)} encoders")
    for name in [n for n in names if n not in timings] if len(names) > 1 else []:
        alone, alone_errors = timed([name])
        if name in alone:
            timings[name], timed_with[name] = alone[name], f"alone (interleaved run: {_short(errors.pop(name))})"
        else:
            errors[name] = alone_errors.get(name, "failed")
    rows = []
    for name in names:
        row: dict[str, Any] = dict(kind="attention_layer", encoder=name, hooks=list(pet.encoder_info(name).hooks),
                                   length=length, batch=batch, dim=dim, heads=heads, head_dim=dim // heads,
                                   dtype="float32", causal=True, options=encoder_options(name, length))
        t = timings.get(name)
        if t is not None:
            row.update(median_ms=t["median_s"] * 1e3, min_ms=t["min_s"] * 1e3, repeats=t["repeats"],
                       time_status="ok", timed=timed_with[name])
        else:
            row.update(median_ms=None, min_ms=None, repeats=0, time_status=errors.get(name, "failed"))
        _, peak, status = one_step(spec, name, "auto", batch, "cpu", warmup_length=8)
        rows.append({**row, "peak_mib": peak, "memory_status": status})
    return rows


def overhead_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Forward + backward time of each encoder over NoPE's at every length where NoPE was timed (backend auto)."""
    out = []
    for length in dict.fromkeys(r["length"] for r in rows):
        by_name = {r["encoder"]: r for r in rows if r["length"] == length and r.get("median_ms")}
        base = by_name.get("nope", {}).get("median_ms")
        out += [dict(kind="overhead_vs_nope", encoder=name, length=length, median_ms=r["median_ms"], nope_ms=base,
                     ratio=r["median_ms"] / base) for name, r in by_name.items()] if base else []
    return out


# --------------------------------------------------------------------------------------- 2. the backends
def _backend_layer(name: str, length: int, backend: str, dim: int, heads: int, device: str):
    """The layer with the encoder in it (one with only an embed hook is refused: nothing here calls embed)."""
    torch.manual_seed(0)
    encoding = None if name == "nope" else pet.get_encoder(name, dim, heads, **encoder_options(name, length))
    return pet.MultiHeadAttention(dim, heads, causal=True, encoding=encoding, backend=backend).to(device)


def infer(name: str, length: int, backend: str, dim: int, heads: int, device: str) -> dict[str, Any]:
    """Child: forward at ``length``, median of 3 calls, and the last 8 output rows as plain floats (the layers of
    every backend share the seed; a tensor would travel through shared memory that dies with the child)."""
    layer = _backend_layer(name, length, backend, dim, heads, device)
    x, times = torch.randn(1, length, dim, device=device), []
    with torch.no_grad():
        for _ in range(3):
            start = clock()
            out = layer(x)
            times.append(clock() - start)
    return {"median_s": statistics.median(times), "sample": out[0, -8:].double().cpu().flatten().tolist()}


def _skip_reason(name: str, backend: str, length: int, heads: int, device: str, limit: int | None) -> str | None:
    needed = 3 * 4 * heads * length * length  # dense SDPA with a bias (batch 1): float32 bias, masked copy, scores
    if backend == "sdpa" and "bias" in pet.encoder_info(name).hooks and limit is not None and needed > limit:
        return (f"skipped: the dense bias, mask and scores need >= {needed / 2**30:.1f} GiB, over the "
                f"{limit / 2**30:.1f} GiB cap")
    if backend == "flex" and device == "cpu":
        return "skipped: FlexAttention has no backward on the CPU"
    return None


def backend_train_row(spec: dict[str, Any]) -> dict[str, Any]:
    name, backend, device = spec["encoder"], spec["backend"], _device(spec)
    row, limit = _row(spec, "backend_train", backend), memory_cap_bytes(spec["memory_limit_gib"])
    skipped = _skip_reason(name, backend, spec["length"], spec["heads"], device, limit)
    if skipped:
        return {**row, "seconds": None, "peak_mib": None, "status": skipped}
    seconds, peak, status = one_step(spec, name, backend, 1, device, warmup_length=256, timeout=CHILD_TIMEOUT_S * 3)
    return {**row, "seconds": seconds, "peak_mib": peak, "status": _short(status)}


def backend_infer_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Inference with sdpa, blocked and flex (after a warm-up call at the same length, where flex compiles)."""
    rows, samples = [], {}
    for backend in ("sdpa", "blocked", "flex"):
        args = (spec["encoder"], spec["length"], backend, spec["dim"], spec["heads"], _device(spec))
        result, peak, status = _measure(spec, infer, *args, warmup=functools.partial(infer, *args))
        if result is not None:
            samples[backend] = result["sample"]
        rows.append(_row(spec, "backend_infer", backend, median_ms=result and result["median_s"] * 1e3,
                         peak_mib=peak, status=_short(status)))
    for row in rows:
        if "sdpa" in samples and row["backend"] in samples:
            row["max_abs_diff_vs_sdpa"] = max(abs(a - b) for a, b in zip(samples[row["backend"]], samples["sdpa"]))
    dense, flex = rows[0], rows[2]
    if flex["status"] == "ok" and dense["status"] == "ok":
        flex["speedup_vs_sdpa"] = dense["median_ms"] / flex["median_ms"]
        flex["memory_ratio_vs_sdpa"] = dense["peak_mib"] / max(flex["peak_mib"], 1e-9)
    return rows


def compiled_row(spec: dict[str, Any]) -> dict[str, Any]:
    row = _row(spec, "compiled_vs_eager", "sdpa", compiler="inductor", rounds=spec["rounds"])
    length, dim, device = spec["length"], spec["dim"], row["device"]
    result, _, status = _measure(spec, lambda: compiled_vs_eager(  # in the child: sdpa eager against compiled
        _backend_layer(spec["encoder"], length, "sdpa", dim, spec["heads"], device),
        torch.randn(1, length, dim, device=device, requires_grad=True), spec["rounds"]))
    if result is None:
        return {**row, "status": _short(status)}
    eager, compiled = result.pop("eager_s") * 1e3, result.pop("compiled_s") * 1e3
    return {**row, "eager_ms": eager, "compiled_ms": compiled, "speedup": eager / compiled, **result, "status": "ok"}


def backend_overhead_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Forward + backward of every (encoder, backend) over NoPE's SDPA at one length, in one child."""
    length, heads, device, rounds = spec["length"], spec["heads"], _device(spec), spec["rounds"]
    limit = memory_cap_bytes(spec["memory_limit_gib"])
    pairs = [(name, backend) for name in spec["encoders"] for backend in [*spec["backends"], "auto"]]
    skipped = {pair: reason for pair in pairs if (reason := _skip_reason(*pair, length, heads, device, limit))}
    configs = [("nope", "sdpa"), *(pair for pair in pairs if pair not in skipped)]
    timing = {"warmup": 0, "max_repeats": rounds, "budget_s": spec["budget_s"], "min_repeats": min(3, rounds)}
    result, _, status = _measure(spec, time_steps, configs, length, 1, spec["dim"], heads, device, timing,
                                 timeout=CHILD_TIMEOUT_S * 4)
    result = result or {"timed": {}, "errors": {f"{n}/{b}": status for n, b in configs}}
    base = result["timed"].get("nope/sdpa")
    rows = []
    for name, backend in [*configs, *skipped]:
        key, row = f"{name}/{backend}", _row({**spec, "encoder": name}, "backend_overhead", backend)
        if base and key in result["timed"]:
            t = result["timed"][key]
            row.update(ratio_vs_nope_sdpa=paired_ratios(t["times_s"], base["times_s"])["ratio_median"],
                       median_ms=t["median_s"] * 1e3, nope_sdpa_ms=base["median_s"] * 1e3, rounds=t["repeats"],
                       first_call_s=result["first_s"][key], status="ok")
        else:
            row.update(ratio_vs_nope_sdpa=None, status=skipped.get((name, backend))
                       or _short(result["errors"].get(key, "failed: not measured")))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- 3. RoPE application
def rope_application(batch: int, heads: int, length: int, head_dim: int, timing: dict) -> list[dict]:
    """Child: our apply_rope against the other libraries' RoPE on q and k: checked in the same layout, then timed."""
    from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope
    from pe_toolkit.integrations.rope_references import RopeImplementation, reference_ropes

    torch.manual_seed(0)
    q, k = torch.randn(batch, heads, length, head_dim), torch.randn(batch, heads, length, head_dim)
    cos, sin = RotaryEncoding(heads * head_dim, heads).cos_sin(torch.arange(length), torch.float32)  # (L, hd/2)

    def ours(interleaved: bool):
        return lambda: tuple(apply_rope(t, cos, sin, interleaved=interleaved) for t in (q, k))

    same_layout = {"half-split": "ours", "interleaved": "ours-interleaved"}
    impls = {"ours": RopeImplementation(ours(False), "half-split", "pe_toolkit", pet.__version__,
                                        "apply_rope(q, cos, sin), apply_rope(k, cos, sin); cos/sin (L, hd/2) cached"),
             "ours-interleaved": RopeImplementation(ours(True), "interleaved", "pe_toolkit", pet.__version__,
                                                    "apply_rope(..., interleaved=True) on q and k")}
    others, missing = reference_ropes(q, k)
    impls.update(others)
    reference = {layout: impls[name].fn() for layout, name in same_layout.items()}
    timings = _interleaved({n: i.fn for n, i in impls.items()}, timing)
    shape = dict(batch=batch, heads=heads, length=length, head_dim=head_dim, dtype="float32")
    rows = []
    for name, impl in impls.items():
        t, same = timings[name], same_layout[impl.layout]
        vs_ours = paired_ratios(t["times_s"], timings["ours"]["times_s"])
        rows.append(dict(
            implementation=name, library=impl.library, version=impl.version, layout=impl.layout, what=impl.what,
            **shape, median_ms=t["median_s"] * 1e3, min_ms=t["min_s"] * 1e3, repeats=t["repeats"], status="ok",
            max_abs_diff_vs_ours=max(float((a - b).abs().max()) for a, b in zip(impl.fn(), reference[impl.layout])),
            ratio_vs_ours=vs_ours["ratio_median"], ratio_vs_ours_p25=vs_ours["ratio_p25"],
            ratio_vs_ours_p75=vs_ours["ratio_p75"], same_layout_reference=same,
            ratio_vs_same_layout=paired_ratios(t["times_s"], timings[same]["times_s"])["ratio_median"]))
    return rows + [dict(implementation=library, library=library, detail=error, status="not installed", **shape)
                   for library, error in missing.items()]


def rope_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    b, h, length, hd = spec["shape"]
    rows, _, status = _measure(spec, rope_application, b, h, length, hd, spec["timing"])
    rows = rows or [dict(implementation="all", library="n/a", batch=b, heads=h, length=length, head_dim=hd,
                         dtype="float32", status=status)]
    return [{**r, "kind": "rope_application"} for r in rows]


# ------------------------------------------------------------------------------------------------ report
PROTOCOL = {
    "layer": "One causal `MultiHeadAttention(dim={c.dim}, num_heads={c.heads})` layer, batch {c.batch}, float32, "
             "forward + backward (`attn(enc.embed(x, pos)).sum().backward()`), each encoder with its registry "
             "`example_options` (learned: `max_len` raised to L). Time: median over rounds of every encoder of one L "
             "interleaved in one forked process after one warm-up call each ({rounds}; rounds used: {used}). "
             "Memory: peak RSS growth of a fresh forked process running one step (after an L=8 step){cap}.\n",
    "backends": "One causal `MultiHeadAttention(dim, heads, backend=...)` layer, float32, batch 1, a forked process "
                "per configuration, with the process defaults a user has. Training: one forward + backward after a "
                "warm-up step at L = 256 (dense SDPA skipped where its (B, H, L, L) bias, mask and scores exceed "
                "the memory cap). Inference: median of 3 forward calls after a warm-up call (where flex compiles).\n",
    "rope": "`theirs / ours`: per-round time ratio to `apply_rope` (half-split, cos/sin `(L, hd/2)` cached), median "
            "and IQR over {repeats} interleaved rounds (above 1: ours is faster); `same layout`: against "
            "`apply_rope(..., interleaved=True)` for interleaved libraries; `max abs diff`: from ours, same layout."
            "\n\n",
}


def _fmt_ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _by_length(rows: list[dict], cell, columns: list[str], header: list[tuple[str, str]]) -> str:
    """A table of one line per ``columns`` value (encoder[, backend]) and per ``(key, head)`` of ``header`` one
    column per length (``head.format(L=L)``), filled from ``cell(row) -> {key: text}``."""
    lengths = sorted({r["length"] for r in rows})
    table: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        entry = table.setdefault(tuple(r.get(c) for c in columns), {c: r.get(c) for c in columns})
        entry.update({f"{k}{r['length']}": v for k, v in cell(r).items()})
    return markdown_table(table.values(), [*columns, *((f"{k}{L}", head.format(L=L)) for k, head in header
                                                       for L in lengths)])


FORMATS = {"median_ms": ".1f", "min_ms": ".2f", "peak_mib": ".0f", "speedup_vs_sdpa": ".2f", "speedup": ".2f",
           "memory_ratio_vs_sdpa": ".1f", "eager_ms": ".1f", "compiled_ms": ".1f", "first_call_s": ".1f",
           "ratio_vs_ours": ".2f", "ratio_vs_same_layout": ".2f", **dict.fromkeys(
               ("max_abs_diff_vs_sdpa", "max_abs_diff_out", "max_abs_diff_grad", "max_abs_diff_vs_ours"), ".1e")}


def layer_table(rows: list[dict[str, Any]], overhead: list[dict[str, Any]]) -> str:
    ratios = {(r["encoder"], r["length"]): f" ({r['ratio']:.2f}x NoPE)" for r in overhead}

    def cell(r):
        alone = " (alone)" if str(r.get("timed", "")).startswith("alone") else ""
        return {"t": _fmt_ms(r["median_ms"]) + alone + ratios.get((r["encoder"], r["length"]), "")
                if r["median_ms"] is not None else _short(r["time_status"]),
                "m": f"{r['peak_mib']:.1f}" if r["peak_mib"] is not None else _short(r["memory_status"])}

    notes = [f"* {r['encoder']} L={r['length']} {key}: {r[key]}" for r in rows for key in
             ("time_status", "memory_status", "timed") if not str(r.get(key, "ok")).startswith(("ok", "interleaved"))]
    return ("### Forward + backward: median ms (over NoPE's) and peak MiB (RSS growth of a fresh forked process)\n\n"
            + _by_length([{**r, "hooks": ", ".join(r["hooks"]) or "none"} for r in rows], cell, ["encoder", "hooks"],
                         [("t", "L={L} ms"), ("m", "L={L} MiB")]) + "".join(f"{n}\n" for n in notes))


def backend_tables(train, infer, compiled, backend_overhead) -> str:
    parts = []
    if train:
        parts.append("### Training step per backend (forward + backward: seconds / peak MiB)\n\n" + _by_length(
            train, lambda r: {"L": f"{r['seconds']:.2f} s / {r['peak_mib']:.0f} MiB" if r["status"] == "ok"
                              else r["status"].split(":")[0]}, ["encoder", "backend"], [("L", "L={L}")]))
        parts += [f"* {s}" for s in sorted({r["status"] for r in train if r["status"] != "ok"})]
    if infer:
        parts.append(f"\n### Inference, forward only, L={infer[0]['length']}\n\n" + markdown_table(
            infer, ["encoder", "backend", ("median_ms", "median ms"), ("peak_mib", "peak MiB"),
                    ("speedup_vs_sdpa", "sdpa / flex time"), ("memory_ratio_vs_sdpa", "sdpa / flex memory"),
                    ("max_abs_diff_vs_sdpa", "max abs diff vs sdpa"), "status"], FORMATS))
    if compiled:
        parts.append(f"### Compiled against eager, L={compiled[0]['length']}, forward + backward, backend sdpa\n\n"
                     "`torch.compile(layer, fullgraph=True)` (inductor): medians over interleaved rounds after the "
                     "first compiled call (which compiles, timed alone).\n\n" + markdown_table(
                         compiled, ["encoder", ("eager_ms", "eager ms"), ("compiled_ms", "compiled ms"),
                                    ("speedup", "eager / compiled"), ("first_call_s", "first call s"),
                                    ("max_abs_diff_out", "max abs diff out"),
                                    ("max_abs_diff_grad", "max abs diff grad"), "status"], FORMATS))
    if backend_overhead:
        parts.append(
            "\n### Forward + backward against NoPE's SDPA, per backend (interleaved rounds in one process)\n\n"
            "Median over the rounds of each step over NoPE's SDPA step of the same round (rounds: "
            + ", ".join(f"L={r['length']}: {r['rounds']}" for r in backend_overhead if r["encoder"] == "nope")
            + "); in brackets the median step; `first call s`: the first step in the process (where the tiled "
            "backend compiles its tile steps); `auto`: what `backend=\"auto\"` chose.\n\n" + _by_length(
                backend_overhead, lambda r: {"L": f"{r['ratio_vs_nope_sdpa']:.2f}x ({r['median_ms']:.0f} ms)",
                                             "f": f"{r['first_call_s']:.1f}"} if r["status"] == "ok"
                else {"L": r["status"].split(":")[0]}, ["encoder", "backend"],
                [("L", "L={L}"), ("f", "first call s, L={L}")]))
    return "\n".join(parts)


def rope_table(rows: list[dict[str, Any]]) -> str:
    r0 = rows[0]
    return (f"\n### RoPE application, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} "
            f"head_dim={r0['head_dim']} float32\n\n" + PROTOCOL["rope"].format(repeats=r0.get("repeats", 0))
            + markdown_table([{**r, "iqr": f"{r['ratio_vs_ours_p25']:.2f} to {r['ratio_vs_ours_p75']:.2f}"}
                              if "ratio_vs_ours_p25" in r else r for r in rows],
                             ["implementation", "layout", ("median_ms", "median ms"), ("min_ms", "min ms"),
                              ("ratio_vs_ours", "theirs / ours"), ("iqr", "IQR of ratio"),
                              ("ratio_vs_same_layout", "theirs / ours same layout"),
                              ("max_abs_diff_vs_ours", "max abs diff"), "status"], {**FORMATS, "median_ms": ".2f"})
            + "\n" + "\n".join(f"* `{r['implementation']}` ({r['library']} {r.get('version', '')}): {r['what']}"
                                if r["status"] == "ok" else f"* `{r['implementation']}`: {r['status']}" for r in rows))


# ------------------------------------------------------------------------------------------------- plots
def plot_vs_length(panels: list[tuple[list[dict], str, str, str]], styles: dict[str, Any] | None = None):
    """One panel per ``(rows, value, y label, title)``: ``value`` over the length, log-log, a line per encoder (with
    ``styles``: per encoder and backend, in the backend's line style); a panel without data gets a note."""
    fig, axes = new_figure(1, len(panels), size=(6, 5) if len(panels) > 1 else (8, 5.5))
    for ax, (rows, value, ylabel, title) in zip(axes[0], panels):
        for i, name in enumerate(dict.fromkeys(r["encoder"] for r in rows)):
            for backend, style in (styles or {None: "-" if i < 10 else "--"}).items():
                points = sorted((r["length"], r[value]) for r in rows
                                if r["encoder"] == name and backend in (None, r.get("backend")) and r.get(value))
                if points:
                    ax.plot(*zip(*points), linestyle=style, marker="os^vD<>phx*+1234"[i % 16], color=f"C{i % 10}",
                            label=name if backend is None else f"{name} {backend}")
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="sequence length L", ylabel=ylabel, title=title)
        ax.grid(True, which="both", alpha=0.3)
    return finish(fig, "a measurement", reason="no configuration was measured in this run", fontsize=7, ncol=2)


def plot_layer(rows: list[dict[str, Any]]):
    return plot_vs_length([(rows, "median_ms", "forward + backward, median ms", "one causal attention layer, time"),
                           (rows, "peak_mib", "peak RSS growth, MiB", "one causal attention layer, memory")])


def plot_backend_overhead(rows: list[dict[str, Any]]):
    fig = plot_vs_length([([r for r in rows if r["status"] == "ok" and r["encoder"] != "nope"], "ratio_vs_nope_sdpa",
                           "forward + backward time / NoPE SDPA (median of per-round ratios)",
                           "Overhead against NoPE per backend (solid: tiled, dashed: sdpa, dash-dot: blocked)")],
                         {"sdpa": "--", "blocked": "-.", "tiled": "-", "flex": ":", "auto": (0, (1, 3))})
    fig.axes[0].axhline(1.0, color="black", linewidth=0.8)
    return fig


def plot_rope(rows: list[dict[str, Any]]):
    measured = [r for r in rows if r["status"] == "ok"]
    fig, ((ax,),) = new_figure(size=(8, 0.5 * len(measured) + 1.5))
    ax.barh([r["implementation"] for r in measured], [r["median_ms"] for r in measured],
            color=["C0" if r["library"] == "pe_toolkit" else "C1" for r in measured])
    ax.invert_yaxis()
    r0 = measured[0]
    ax.set(title="RoPE application", xlabel=f"median ms, q and k, B={r0['batch']} H={r0['heads']} L={r0['length']} "
                                            f"hd={r0['head_dim']} fp32")
    return finish(fig, "RoPE time", legend=False)


# --------------------------------------------------------------------------------------------- benchmark
PARTS = {"attention_layers": layer_rows, "backend_train": backend_train_row, "backend_inference": backend_infer_rows,
         "compiled_vs_eager": compiled_row, "backend_overheads": backend_overhead_rows, "rope_applications": rope_rows}
"""Run kind -> what measures it: one row, or a list of rows (kept in the run's ``rows``)."""


class Speed(Benchmark):
    name = "speed"
    title = "Speed: attention layer per encoder and RoPE application"
    Config = Config
    key_fields = ("kind", "encoder", "backend", "length")
    exclusive = True  # timings: never run next to another run

    def check(self, config: Config) -> None:
        if config.layer.dim % config.layer.heads:
            raise ValueError(f"layer.heads ({config.layer.heads}) must divide layer.dim ({config.layer.dim})")
        if len(config.rope.shape) != 4 or config.rope.shape[3] % 2:
            raise ValueError(f"rope.shape must be [B, H, L, head_dim] with an even head_dim, got {config.rope.shape}")
        for key, t in (("layer.timing", config.layer.timing), ("rope.timing", config.rope.timing)):
            if t.min_repeats > t.max_repeats:
                raise ValueError(f"{key}: min_repeats ({t.min_repeats}) must be <= max_repeats ({t.max_repeats})")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        layer, b = config.layer, config.backends
        common = {"dim": layer.dim, "heads": layer.heads, "memory_limit_gib": config.memory_limit_gib}
        specs = [{"kind": "attention_layers", "encoder": "all", "backend": "auto", "length": length, **common,
                  "encoders": layer.encoders or pet.list_encoders(domain="sequence"), "batch": layer.batch,
                  "timing": dataclasses.asdict(layer.timing)} for length in layer.lengths]
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
        return measured if isinstance(measured, dict) else {k: spec[k] for k in self.key_fields} | {"rows": measured}

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        """The measured rows of every run (a run of several configurations holds them in ``rows``)."""
        flat = [r for run in result.rows for r in run.get("rows", [])]
        return flat + overhead_rows([r for r in flat if r["kind"] == "attention_layer"])

    def plot(self, result: Result) -> dict[str, Any]:
        rope, overhead = result.derived_of("rope_application"), result.derived_of("backend_overhead")
        train = [r for r in result.rows if r["kind"] == "backend_train" and r["status"] == "ok"]
        plots = {"layer_time_memory_vs_length.png": plot_layer(result.derived_of("attention_layer"))}
        if any(r["status"] == "ok" for r in rope):
            plots["rope_application.png"] = plot_rope(rope)
        if train:
            plots["backend_memory_vs_length.png"] = plot_vs_length(
                [(train, "peak_mib", "peak RSS growth, MiB (one layer, forward + backward)",
                  "Training memory per backend (dashed: dense sdpa, solid: blocked)")],
                {"sdpa": "--", "blocked": "-", "flex": ":"})
        if overhead:
            plots["overhead_vs_length.png"] = plot_backend_overhead(overhead)
        return plots

    def report(self, result: Result) -> str:
        layer, c, limit = result.derived_of("attention_layer"), result.config.layer, memory_cap_bytes(
            result.config.memory_limit_gib)
        t = c.timing
        rounds = (f"new rounds until {t.budget_s:.0f} s are spent, {t.min_repeats} to {t.max_repeats}"
                  if t.budget_s is not None else f"{t.max_repeats} rounds")
        used = ", ".join(f"L={L}: {next((r['repeats'] for r in layer if r['length'] == L and r['repeats']), 0)}"
                         for L in c.lengths)
        cap = f"; at most {limit / 2**30:.1f} GiB of growth (`memory_limit_gib`)" if limit is not None else ""
        body = [PROTOCOL["layer"].format(c=c, rounds=rounds, used=used, cap=cap),
                layer_table(layer, result.derived_of("overhead_vs_nope")) if layer else ""]
        parts = ([r for r in result.rows if r["kind"] == "backend_train"], result.derived_of("backend_infer"),
                 [r for r in result.rows if r["kind"] == "compiled_vs_eager"], result.derived_of("backend_overhead"))
        if any(parts):
            on_gpu = any(r.get("device") == "cuda" for part in parts for r in part)
            body += ["\n## Attention backends\n", PROTOCOL["backends"],
                     "GPU rows: " + ("measured on CUDA.\n" if on_gpu else "not measured (no GPU in this run).\n"),
                     backend_tables(*parts)]
        if rope := result.derived_of("rope_application"):
            body.append(rope_table(rope))
        return "\n".join(body)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="speed", prog="python benchmarks/speed.py"))
