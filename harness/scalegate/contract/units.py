"""Units a user writes in options and both sides read: link rates in tc's notation."""

from __future__ import annotations

import re

from scalegate.contract.errors import SpecError

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$")
_UNIT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate(text: str) -> float:
    """``1gbit`` -> 1e9 bits/s; raises SpecError naming the option otherwise."""
    match = _RATE.match(text.strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise SpecError(
            f"--scaling-link-rate={text!r} is not a tc rate like 1gbit, 200mbit, 10gbit",
            "write a positive number followed by bit, kbit, mbit, gbit or tbit",
        )
    return float(match.group(1)) * _UNIT[match.group(2)]
