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
