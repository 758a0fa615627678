"""``python -m scalegate.worker SPEC.json OUT_DIR``: one rank (harness/scalegate/worker/entry.py)."""

from scalegate.worker.ending import quick_exit
from scalegate.worker.entry import main

quick_exit(main())
