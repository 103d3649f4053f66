"""The docs stay in step with the registry."""

from pathlib import Path

import pe_toolkit as pet

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_sequence_encoder_is_documented():
    table = (DOCS / "encoders.md").read_text()
    missing = [name for name in pet.list_encoders(domain="sequence") if f"| `{name}` |" not in table]
    assert not missing, f"docs/encoders.md lacks {missing}"


def test_api_page_covers_every_encoder_module():
    api = (DOCS / "api.md").read_text()
    modules = sorted(p.stem for p in (DOCS.parent / "pe_toolkit" / "encoders").glob("*.py") if p.stem != "__init__")
    assert all(f"::: pe_toolkit.encoders.{m}" in api for m in modules)


def test_site_builds_strictly(tmp_path):
    """mkdocs (installed by `make test`) renders every docstring without warnings."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=DOCS.parent, capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    figures = {p.stem for p in (site / "gallery").glob("*.png")}
    assert figures == set(pet.list_encoders()), "the gallery has one figure per registered encoder"
    gallery = (site / "gallery" / "index.html").read_text()
    assert all(f"{name}.png" in gallery for name in figures)  # and the page shows each of them
    for tutorial in (DOCS / "tutorials").glob("*.md"):
        images = [line for line in tutorial.read_text().splitlines() if "](figures/" in line]
        assert images, f"{tutorial.name} shows no figure of its own code"
        for line in images:
            name = line.split("](figures/")[1].split(")")[0]
            assert (site / "tutorials" / "figures" / name).stat().st_size > 1000, name
