"""The built site in a real browser (headless Chromium): docs/scripts/browser_check.py on every page it opens.

Skipped where no Chromium is installed (Debian: ``apt-get install chromium``).
"""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "scripts" / "browser_check.py"


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_site_in_headless_chromium(tmp_path):
    spec = importlib.util.spec_from_file_location("browser_check", SCRIPT)
    browser_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(browser_check)
    status = browser_check.main(["--shots", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    assert status == 0, [r for r in report if not r["ok"]]
    assert {r["page"] for r in report} >= {"/", "/benchmarks/", "/tutorials/graphs/", "/tutorials/vision/"}
    assert all((tmp_path / name).stat().st_size > 10_000 for name in ("home.png", "tutorials-graphs-figure.png"))
