"""Rank 0's loss lines (harness/scalegate/worker/script_loss.py): read from its log file where its output is one, from
wrapped streams where it is not; stdout's curve first, else stderr's."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from scalegate.worker import script_loss

PATTERN = r"step (\d+) loss ([0-9.]+)"


def test_a_stream_on_a_file_is_read_from_where_the_script_began_only_what_is_new(tmp_path, monkeypatch):
    log = open(tmp_path / "rank0.log", "w+")
    log.write("step 99 loss 9.0  (before the script: not its curve)\n")
    log.flush()
    monkeypatch.setattr(sys, "stdout", log)
    reader = script_loss.LogFile.open(log.fileno(), log, re.compile(PATTERN))
    assert reader is not None
    log.write("step 0 loss 2.5\nstep 1 loss 2.0\nstep 2 lo")
    reader.read()
    assert reader.found == [(0.0, 2.5), (1.0, 2.0)]  # the half-written line waits for its end
    log.write("ss 1.5\nno loss here\n")
    reader.read()
    assert reader.found == [(0.0, 2.5), (1.0, 2.0), (2.0, 1.5)]


def test_streams_that_are_no_files_are_wrapped_and_put_back(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    found: list = []
    losses = script_loss.Losses(PATTERN, found)
    assert losses.how == ["wrapped", "wrapped"] and sys.stdout is not out
    print("step 0 loss 3.0")
    print("step 0 loss 7.0", file=sys.stderr)
    losses.close()
    assert found == [(0.0, 3.0)] and sys.stdout is out and sys.stderr is err  # stdout's curve first
    assert out.getvalue() == "step 0 loss 3.0\n"  # passed through


def test_a_curve_only_on_stderr_is_read_there(tmp_path):
    """As a rank runs: fd 1 and fd 2 are files (torchrun's --redirects), the script logs to stderr."""
    code = f"""
import sys
from scalegate.worker import script_loss
found = []
losses = script_loss.Losses({PATTERN!r}, found)
print("starting")
for i in range(3):
    print(f"step {{i}} loss {{1.0 / (i + 1)}}", file=sys.stderr)
losses.close()
sys.__stdout__.write(repr((losses.how, found)) + "\\n")
"""
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        subprocess.run([sys.executable, "-c", code], stdout=out, stderr=err, check=True)
    last = (tmp_path / "out").read_text().splitlines()[-1]
    assert last == repr((["file", "file"], [(0.0, 1.0), (1.0, 0.5), (2.0, 1 / 3)]))
