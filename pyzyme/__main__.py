"""``python -m pyzyme``: the command line (see :mod:`pyzyme.cli`)."""

import sys

from pyzyme.cli import main

sys.exit(main())
