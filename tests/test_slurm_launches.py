"""A multi-node case's launches under srun (launch/slurm_launches.py): the other nodes join exactly the launches node
0 starts, however many its session asks for (a script's pooled launches, the sequential test's next ones), and one
whose node 0 falls silent stops with the reason instead of waiting out torchrun's rendezvous."""

from __future__ import annotations

import threading
import time

import pytest

from scalegate.contract.errors import LaunchError
from scalegate.launch import slurm_launches


def test_a_node_joins_each_launch_node_0_starts_and_stops_when_it_is_done(tmp_path):
    case = tmp_path / "ddp-mlp-2x1"
    joined: list[float] = []

    def node_0() -> None:
        for n in (1, 2, 3):  # e.g. a script's two pooled launches, then one the sequential test asked for
            slurm_launches.announce(case, n)
            time.sleep(0.5)
        slurm_launches.announce(case, 3, done=True)

    leader = threading.Thread(target=node_0)
    leader.start()
    made = slurm_launches.follow(case, lambda: joined.append(time.monotonic()), wait_s=10)
    leader.join()
    assert made == 3 and len(joined) == 3, "node 1 must join every launch node 0 starts, no more"


def test_a_case_node_0_judged_without_a_launch_ends_at_once(tmp_path):
    slurm_launches.announce(tmp_path / "case", 0, done=True)  # e.g. it failed before its first launch
    assert slurm_launches.follow(tmp_path / "case", lambda: pytest.fail("launched"), wait_s=10) == 0


def test_a_silent_node_0_stops_the_node_with_the_file_it_waited_for(tmp_path):
    with pytest.raises(LaunchError) as stopped:
        slurm_launches.follow(tmp_path / "fsdp-cnn-2x1", lambda: None, wait_s=1.0)
    assert "node 0 started no launch of fsdp-cnn-2x1 for 1 s after this node's 0" in str(stopped.value)
    assert "launches.json" in str(stopped.value) and "shares" in stopped.value.hint
