"""Docs build step (mkdocs-gen-files): ``gallery.md``, one figure per registered encoder.

Every figure is drawn at build time by :func:`pe_toolkit.plotting.plot_positional_pattern`, the
function behind ``pe-toolkit plot NAME``; nothing is copied from ``results/``. Every domain is
imported (the docs environment has every extra), so a domain that fails to import fails the build.
"""

from __future__ import annotations

import mkdocs_gen_files

import pe_toolkit as pet
from pe_toolkit.plotting import DEFAULT_DIM, DEFAULT_HEADS, plot_positional_pattern
from pe_toolkit.quiet import quiet_third_party
from pe_toolkit.registry import list_domains

quiet_third_party()  # the domains' imports print dependencies' deprecation notes otherwise

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
    "These figures are generated when the site is built.",
    "",
]
for domain in domains:
    lines += [f"## {domain}", ""]
    for name in pet.list_encoders(domain=domain):
        info = pet.encoder_info(name)
        figure = plot_positional_pattern(name, length=LENGTH)
        with mkdocs_gen_files.open(f"gallery/{name}.png", "wb") as handle:
            figure.savefig(handle, format="png", dpi=72)
        hooks = ", ".join(f"`{h}`" for h in info.hooks) or "none"
        lines += [
            f"### `{name}`",
            "",
            f"{info.reference}. Hooks: {hooks}; relative: {'yes' if info.relative else 'no'}.",
            "",
            f"![{name}: positional pattern](gallery/{name}.png)",
            "",
        ]

with mkdocs_gen_files.open("gallery.md", "w") as handle:
    handle.write("\n".join(lines))
