"""``python -m pe_toolkit.bench NAME ...`` = ``pe-toolkit bench NAME ...``."""

import sys

from pe_toolkit.bench.cli import main

sys.exit(main(prog="python -m pe_toolkit.bench"))
