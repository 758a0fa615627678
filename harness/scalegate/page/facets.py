"""A case id split into what both pages filter by: strategy, model, topology (and strong scaling).

Case ids read ``strategy-model-topology`` (``deepspeed-zero2-cnn-1x2``, ``fsdp-hf:gpt2-2x2-strong``); strategy
names hold hyphens themselves, so the strategy is the longest known name the id starts with (``known``: the
strategy registry's names), and the topology is the ``NxG`` part at the end. A user's script case with a
strategy word scalegate does not know falls back to the id's first word.
"""

from __future__ import annotations

import re
from typing import Iterable

TOPOLOGY = re.compile(r"^\d+x\d+$")


def split_case_id(case_id: str, known: Iterable[str] = ()) -> dict[str, str]:
    """``{"strategy", "model", "topology", "scaling"}`` of a case id; parts it cannot find are ``"?"``."""
    rest, scaling = (case_id[: -len("-strong")], "strong") if case_id.endswith("-strong") else (case_id, "weak")
    head, _, last = rest.rpartition("-")
    topology = last if head and TOPOLOGY.match(last) else "?"
    if topology != "?":
        rest = head
    strategy = max((s for s in known if rest.startswith(s + "-")), key=len, default="")
    if not strategy:
        strategy, _, model = rest.partition("-")
    else:
        model = rest[len(strategy) + 1 :]
    return {"strategy": strategy or "?", "model": model or "?", "topology": topology, "scaling": scaling}
