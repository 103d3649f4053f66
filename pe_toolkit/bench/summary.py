"""Per-group summaries of benchmark rows: mean and interval of each metric over seeds, and their table.

Every benchmark summarises its rows the same way: group them (e.g. by encoder and task), then each metric's
replicates through :func:`pe_toolkit.bench.verdict.summarize` (Student-t interval, non-finite runs counted,
bounded metrics kept in range; scipy, the ``stats`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import format_side, summarize

__all__ = ["group_rows", "summarize_groups", "summary_table"]

Bounds = tuple[float, float] | None


def group_rows(rows: Iterable[Mapping[str, Any]], by: Sequence[str]) -> dict[tuple, list[Mapping[str, Any]]]:
    """``{(row[by[0]], row[by[1]], ...): rows}`` in the order the groups first appear."""
    if isinstance(by, str):
        raise TypeError(f"by must be a sequence of field names, got the string {by!r} (write ({by!r},))")
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        missing = [key for key in by if key not in row]
        if missing:
            raise ValueError(f"row {dict(row)!r} lacks the grouping field(s) {missing}")
        groups.setdefault(tuple(row[key] for key in by), []).append(row)
    return groups


def summarize_groups(rows: Iterable[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str], *,
                     bounds: Bounds | Mapping[str, Bounds] = None, confidence: float = 0.95,
                     keep: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One entry per group: its ``by`` fields, ``runs`` and, per metric, a summary dict (mean, low, high, n, ...).

    Args:
        rows: the runs; a metric missing from a row (or ``None`` / NaN) counts as a non-finite replicate.
        by: the fields that name a group.
        metrics: the fields to summarise.
        bounds: the metrics' range, one ``(low, high)`` for all or ``{metric: (low, high) or None}``.
        keep: fields copied from the group's first row (equal across seeds, e.g. a parameter count).

    Example:
        >>> rows = [{"pe": "rope", "acc": 0.5}, {"pe": "rope", "acc": 0.7}]
        >>> entry = summarize_groups(rows, ("pe",), ("acc",), bounds=(0, 1))[0]
        >>> entry["pe"], entry["runs"], round(entry["acc"]["mean"], 3)
        ('rope', 2, 0.6)
    """
    if isinstance(bounds, Mapping):
        unknown = sorted(set(bounds) - set(metrics))
        if unknown:
            raise ValueError(f"bounds names metrics {unknown} that are not in metrics {list(metrics)}")
    out = []
    for key, members in group_rows(rows, by).items():
        entry: dict[str, Any] = dict(zip(by, key))
        entry["runs"] = len(members)
        for field in keep:
            entry[field] = members[0].get(field)
        for metric in metrics:
            metric_bounds = bounds.get(metric) if isinstance(bounds, Mapping) else bounds
            entry[metric] = summarize([m.get(metric) for m in members], confidence=confidence,
                                      bounds=metric_bounds).as_dict()
        out.append(entry)
    return out


def summary_table(entries: Sequence[Mapping[str, Any]], columns: Sequence[str | tuple[str, str]],
                  metrics: Sequence[str | tuple[str, str]], fmt: str | Mapping[str, str] = ".3f", *,
                  formats: Mapping[str, str | Callable[[Any], str]] | None = None) -> str:
    """A markdown table of :func:`summarize_groups` entries: ``columns`` as they are, each metric as
    ``mean [low, high] (n=...)`` (``fmt``: one format or ``{metric: format}``); ``(field, header)`` renames."""
    def field(column: str | tuple[str, str]) -> str:
        return column if isinstance(column, str) else column[0]

    cells = []
    for entry in entries:
        cell = dict(entry)
        for metric in map(field, metrics):
            metric_fmt = fmt.get(metric, ".3f") if isinstance(fmt, Mapping) else fmt
            cell[metric] = format_side(entry[metric], metric_fmt) if metric in entry else "-"
        cells.append(cell)
    return markdown_table(cells, [*columns, *metrics], formats=formats)
