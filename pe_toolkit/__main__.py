"""``python -m pe_toolkit``: the ``pe-toolkit`` command (:mod:`pe_toolkit.cli`)."""

import sys

from pe_toolkit.cli import main

sys.exit(main())
