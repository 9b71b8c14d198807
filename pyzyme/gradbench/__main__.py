"""``python -m pyzyme.gradbench``: answer a GradBench eval on stdin and stdout."""

import sys

from pyzyme.gradbench.protocol import main

if __name__ == "__main__":
    sys.exit(main())
