"""The ``pe-toolkit`` command (also ``python -m pe_toolkit``).

::

    pe-toolkit list [--domain D] [--format table|markdown|json]   name, domain, hooks, relative, reference
    pe-toolkit info NAME                                          options with defaults, docstring summary
    pe-toolkit plot NAME [-o FILE] [--length L] [--dim D] [--heads H] [--option KEY=VALUE ...]
    pe-toolkit bench [--list | NAME|all [--quick] [options ...]]  a benchmark (pe-toolkit bench --help)

``list`` imports every domain it can; a domain whose extra is missing is listed with the command that
installs it. Exit status: 0 on success, 1 when the command failed (message on stderr), 2 for bad
arguments; ``bench`` returns the benchmark's own status.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pe_toolkit import registry
from pe_toolkit.encoders.base import PositionalEncoding


# ------------------------------------------------------------------------------------------ list
def encoder_rows(domain: str | None = None) -> list[dict[str, Any]]:
    """One dict per encoder (every domain, or ``domain``): name, domain, hooks, relative, reference.

    A domain that cannot be imported (its extra is missing) gives rows whose ``hooks`` is ``None``
    and whose ``missing`` holds the ImportError's message with the install command.
    """
    domains = [domain] if domain is not None else registry.list_domains()
    failures: dict[str, str] = {}
    for name in domains:
        try:
            registry.load_domain(name)
        except ImportError as error:
            failures[name] = str(error)
    rows = []
    for name, owner in registry.available_names().items():
        if domain is not None and owner != domain:
            continue
        try:
            if owner in failures:
                raise ImportError(failures[owner])
            info = registry.encoder_info(name)
        except ImportError as error:
            rows.append({"name": name, "domain": owner, "hooks": None, "relative": None, "reference": None,
                         "missing": str(error)})
            continue
        rows.append({"name": name, "domain": info.domain, "hooks": list(info.hooks), "relative": info.relative,
                     "reference": info.reference, "missing": None})
    return rows


def _cells(row: dict[str, Any]) -> list[str]:
    if row["missing"] is not None:
        command = re.search(r"pip install '[^']+'", row["missing"])  # the table shows the fix, JSON the whole error
        return [row["name"], str(row["domain"]), "-", "-",
                f"not installed: {command.group(0) if command else row['missing']}"]
    return [row["name"], row["domain"], "+".join(row["hooks"]) or "none", "yes" if row["relative"] else "no",
            row["reference"]]


def format_table(rows: list[dict[str, Any]], style: str = "table") -> str:
    """Render :func:`encoder_rows` as an aligned text table, a markdown table or JSON."""
    if style == "json":
        return json.dumps(rows, indent=1)
    header = ["name", "domain", "hooks", "relative", "reference"]
    body = [_cells(row) for row in rows]
    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in body])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1]
                     for cells in [header, *body])


# ------------------------------------------------------------------------------------------ info
def argument_docs(doc: str) -> dict[str, str]:
    """``{name: first sentence}`` of a Google-style ``Args:`` / ``Options:`` section; ``a, b: text`` documents both."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in ("Args:", "Options:")), None)
    if start is None:
        return found
    indent, current = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:  # the next section
            break
        head, sep, text = line.strip().partition(":")
        names = [n.strip() for n in head.split(",")]
        if width == indent and sep and all(n.isidentifier() for n in names):
            current = names
            for n in names:
                found[n] = text.strip()
        elif current is not None:  # a continuation line
            for n in current:
                found[n] = f"{found[n]} {line.strip()}".strip()
    return {n: re.split(r"\.\s+(?=[A-Z`])", text)[0].rstrip(".") for n, text in found.items()}


def terminal_text(text: str) -> str:
    """Docstring markup as a terminal shows it: ``:class:`~a.B``` -> ``B``, ````x```` -> ``x``."""
    text = re.sub(r":[\w:]+:`~([\w.]+)`", lambda m: m[1].rsplit(".", 1)[-1], text)  # :func:`~a.b` -> b
    text = re.sub(r":[\w:]+:`([^`]+)`", r"\1", text)                                # :class:`a.B` -> a.B
    return re.sub(r"``([^`]+)``", r"\1", text)


def describe(name: str) -> str:
    """What ``pe-toolkit info NAME`` prints: metadata, constructor options with defaults, docstring summary."""
    info = registry.encoder_info(name)
    doc = inspect.getdoc(info.cls) or ""
    summary = terminal_text(doc.split("\n\n")[0].replace("\n", " "))
    lines = [f"{info.name}  ({info.domain})  {info.cls.__module__}.{info.cls.__qualname__}", "", summary, "",
             f"hooks:     {', '.join(info.hooks) or 'none (NoPE)'}",
             f"relative:  {'yes (logits depend on positions only through i - j)' if info.relative else 'no'}",
             f"reference: {info.reference}", "",
             f"get_encoder({info.name!r}, dim, num_heads, **options); options:"]
    documented = {**argument_docs(inspect.getdoc(PositionalEncoding) or ""), **argument_docs(doc)}
    signature = inspect.signature(info.cls.__init__)
    for parameter in list(signature.parameters.values())[1:]:
        variadic = parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        if variadic or parameter.name in ("dim", "num_heads"):
            continue
        default = "required" if parameter.default is parameter.empty else f"= {parameter.default!r}"
        text = terminal_text(documented.get(parameter.name, ""))
        lines.append(f"  {parameter.name:22s} {default:14s} {text}".rstrip())
    if info.example_options:
        lines.append(f"example options: {info.example_options}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ bench
def bench(arguments: Sequence[str]) -> int:
    """``pe-toolkit bench ...``: the benchmark harness's command line (:mod:`pe_toolkit.bench.cli`)."""
    from pe_toolkit.bench.cli import main as bench_main

    return bench_main(list(arguments))


# ------------------------------------------------------------------------------------------ plot
def parse_option(text: str) -> tuple[str, Any]:
    """``"KEY=VALUE"`` -> ``(KEY, literal VALUE)``; a VALUE that is not a Python literal stays a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise ValueError(f"--option must look like KEY=VALUE with KEY an identifier, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def plot(name: str, output: Path, *, length: int, dim: int, num_heads: int, options: dict[str, Any]) -> Path:
    from pe_toolkit.plotting import plot_positional_pattern

    if output.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ValueError(f"--output must end in .png, .pdf or .svg, got {str(output)!r}")
    figure = plot_positional_pattern(name, length=length, dim=dim, num_heads=num_heads, options=options)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    return output


# ------------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pe-toolkit", description="Positional encodings for Transformers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="every registered encoder, in every domain")
    listing.add_argument("--domain", help="only this domain (sequence, graphs, music, ...)")
    listing.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    info = commands.add_parser("info", help="an encoder's options, defaults and summary")
    info.add_argument("name")
    drawing = commands.add_parser("plot", help="draw an encoder's positional pattern (needs the 'plot' extra)")
    drawing.add_argument("name")
    drawing.add_argument("-o", "--output", type=Path, help="image file (.png/.pdf/.svg; default NAME.png)")
    drawing.add_argument("--length", type=int, default=32)
    drawing.add_argument("--dim", type=int, default=64)
    drawing.add_argument("--heads", type=int, default=4)
    drawing.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="a constructor option (repeatable), e.g. --option scaling=yarn --option factor=4.0")
    bench = commands.add_parser("bench", help="run a benchmark (pe-toolkit bench --list; pe-toolkit bench --help)",
                                description="See pe-toolkit bench --help.")
    bench.add_argument("name")
    bench.add_argument("arguments", nargs=argparse.REMAINDER, help="passed to the benchmark (e.g. --quick)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pe_toolkit.quiet import quiet_third_party

    quiet_third_party()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # its own parser (pe_toolkit.bench.cli): --list, --help, presets, executors
        # its argument and config errors are parser errors (exit 2); a run that fails keeps its traceback, as with
        # python -m pe_toolkit.bench and python benchmarks/NAME.py (the same code)
        return bench(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "list":
            print(format_table(encoder_rows(args.domain), args.format))
        elif args.command == "info":
            print(describe(args.name))
        elif args.command == "plot":
            options = dict(parse_option(text) for text in args.option)
            output = args.output if args.output is not None else Path(f"{args.name}.png")
            print(plot(args.name, output, length=args.length, dim=args.dim, num_heads=args.heads, options=options))
    except (ValueError, TypeError, ImportError, RuntimeError) as error:
        print(f"pe-toolkit {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
