"""Make the repository root importable so tests can ``from benchmarks import common, speed``.

``benchmarks/`` is a folder of scripts, not an installed package; with the repo root on
``sys.path`` it imports as a namespace package.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
