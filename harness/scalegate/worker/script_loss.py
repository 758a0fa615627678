"""Rank 0's loss lines, read off its own output with the case's ``loss_pattern`` (harness/scalegate/worker/script.py).

Every launcher redirects a rank's stdout and stderr to its rank logs (torchrun's ``--redirects``): there each
stream's file is read from where the script began, when the measured window closes and when the script ends,
so nothing runs per printed line. A stream that is not a file (a pipe, a terminal) is wrapped instead
(``LossReader``): about 1.6 us a line alone, measured 0.4-0.9% of a 1.5 ms CPU step in the loop
(benchmarks/script_overhead.py, docs/your-script.md). The curve is stdout's matches, else stderr's (``logging``
writes there): one stream's lines, in their order.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from typing import Any

Point = tuple[float, float]


def parse(line: str, pattern: re.Pattern, found: list[Point]) -> None:
    """(the script's step, loss) from a pattern of two groups; (the match's index, loss) from one."""
    match = pattern.search(line)
    if not match:
        return
    try:
        values = [float(g) for g in match.groups()]
    except ValueError:
        return
    found.append((values[0], values[1]) if len(values) == 2 else (float(len(found)), values[0]))


class LossReader(io.TextIOBase):
    """Passes a stream through and reads ``pattern`` off every whole line."""

    def __init__(self, stream: Any, pattern: re.Pattern, found: list[Point]) -> None:
        self.stream, self.pattern, self.found, self.pending = stream, pattern, found, ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        if "\n" not in text:  # print() writes its text and its end apart: only a line's end is read
            self.pending += text
            return len(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            parse(line, self.pattern, self.found)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return False


class LogFile:
    """A stream whose descriptor is a regular file, read (through /proc/self/fd) from the offset it had when the
    script began; each ``read`` parses only what was written since the last one."""

    def __init__(self, fd: int, stream: Any, start: int, pattern: re.Pattern) -> None:
        self.fd, self.stream, self.pos, self.pattern = fd, stream, start, pattern
        self.pending = b""
        self.found: list[Point] = []

    @classmethod
    def open(cls, fd: int | None, stream: Any, pattern: re.Pattern) -> LogFile | None:
        if fd is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            stream.flush()
            start = os.lseek(fd, 0, os.SEEK_CUR)
            with open(f"/proc/self/fd/{fd}", "rb"):
                pass
        except (OSError, ValueError, AttributeError):
            return None
        return cls(fd, stream, start, pattern)

    def read(self) -> None:
        try:
            self.stream.flush()
            with open(f"/proc/self/fd/{self.fd}", "rb") as log:
                log.seek(self.pos)
                chunk = log.read()
        except (OSError, ValueError):
            return  # the stream was closed by the script: what was read stays
        self.pos += len(chunk)
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            parse(line.decode(errors="replace"), self.pattern, self.found)


class Losses:
    """Rank 0's two streams, each read from its file or wrapped; ``read()`` brings ``found`` up to date."""

    def __init__(self, pattern: str, found: list[Point], files: bool = True) -> None:
        """``files=False`` wraps both streams whatever they are (benchmarks/script_overhead.py --wrapped)."""
        self.found, self.saved = found, (sys.stdout, sys.stderr)
        compiled = re.compile(pattern)
        self.sources: list[LogFile | list[Point]] = []
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            log = LogFile.open(_fileno(stream), stream, compiled) if files else None
            if log is None:
                points: list[Point] = []
                setattr(sys, name, LossReader(stream, compiled, points))
                self.sources.append(points)
            else:
                self.sources.append(log)
        self.how = ["file" if isinstance(s, LogFile) else "wrapped" for s in self.sources]

    def read(self) -> None:
        curves = []
        for source in self.sources:
            if isinstance(source, LogFile):
                source.read()
                curves.append(source.found)
            else:
                curves.append(source)
        self.found[:] = next((c for c in curves if c), [])

    def close(self) -> None:
        self.read()
        sys.stdout, sys.stderr = self.saved


def _fileno(stream: Any) -> int | None:
    """The descriptor a stream writes to; None for one in memory (a script's own StringIO, a test's capture)."""
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
