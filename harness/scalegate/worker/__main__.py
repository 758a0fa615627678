"""``python -m scalegate.worker SPEC.json OUT_DIR``: one rank (harness/scalegate/worker/entry.py)."""

import sys

from scalegate.worker.entry import main

sys.exit(main())
