"""Draw the Gallery: ``python docs/scripts/gallery.py`` writes ``docs/gallery.md`` and ``docs/gallery/``.

One figure per registered encoder, drawn by :func:`pe_toolkit.plotting.plot_positional_pattern`, the
function behind ``pe-toolkit plot NAME``; nothing is copied from ``results/``. Every domain is
imported (the docs environment has every extra), so a domain that fails to import fails here.
Drawing 36 figures takes about a minute, so the page and its figures are committed and the site
build only reads them; ``tests/test_docs_site.py`` checks that the page lists every registered encoder.
Each encoder is built after ``torch.manual_seed(0)``, so a rerun redraws the same figures.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib
import torch

import pe_toolkit as pet
from pe_toolkit.plotting import DEFAULT_DIM, DEFAULT_HEADS, plot_positional_pattern
from pe_toolkit.quiet import quiet_third_party
from pe_toolkit.registry import list_domains

matplotlib.use("Agg")
quiet_third_party()  # the domains' imports print dependencies' deprecation notes otherwise
DOCS = Path(__file__).resolve().parents[1]
COMMAND = "python docs/scripts/gallery.py"

LENGTH = 32

domains = ["sequence", *[d for d in list_domains() if d != "sequence"]]
lines = [
    "# Gallery",
    "",
    "What each registered encoder adds to the attention logits, per head, as a function of the query",
    f"and key positions (`L = {LENGTH}`, `dim = {DEFAULT_DIM}`, {DEFAULT_HEADS} heads, each encoder's example",
    "options and example positions, parameters at initialisation). Below each map, the mean over pairs",
    "at each distance `i - j`. Content is the same vector (ones) at every position, so rotary",
    "encodings show their decay with distance; an encoding with only an `embed` hook shows the",
    "position-position term `e_i . e_j / sqrt(head_dim)`. The definition is in",
    "[`PositionalEncoding.positional_pattern`](api.md). Draw any of them yourself:",
    "",
    "```sh",
    "pe-toolkit plot rope --option scaling=yarn --option factor=4.0 --option original_max_position=16 -o rope.png",
    "```",
    "",
    f"These figures are drawn by `{COMMAND}` (parameters at initialisation after `torch.manual_seed(0)`).",
    "",
]
shutil.rmtree(DOCS / "gallery", ignore_errors=True)
(DOCS / "gallery").mkdir()
for domain in domains:
    lines += [f"## {domain}", ""]
    for name in pet.list_encoders(domain=domain):
        info = pet.encoder_info(name)
        torch.manual_seed(0)
        figure = plot_positional_pattern(name, length=LENGTH)
        figure.savefig(DOCS / "gallery" / f"{name}.png", format="png", dpi=72, metadata={"Software": None})
        hooks = ", ".join(f"`{h}`" for h in info.hooks) or "none"
        lines += [
            f"### `{name}`",
            "",
            f"{info.reference}. Hooks: {hooks}; relative: {'yes' if info.relative else 'no'}.",
            "",
            f"![{name}: positional pattern](gallery/{name}.png)",
            "",
        ]

(DOCS / "gallery.md").write_text("\n".join(lines) + "\n")
print(f"docs/gallery.md: {sum(1 for line in lines if line.startswith('### '))} encoders")
