"""Network-namespace primitives, for real (skipped with the reason where namespaces cannot be made)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalegate.launch import netns

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=f"{netns.available()}")


def test_namespace_is_made_counted_and_always_removed():
    with pytest.raises(KeyboardInterrupt):
        with netns.namespace("unit") as name:
            assert name in netns.list_namespaces()
            before = netns.counters(name)
            code = (
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                "s.sendto(b'x' * 1000, ('127.0.0.1', 9))"
            )
            subprocess.run(netns.exec_prefix(name) + [sys.executable, "-c", code], check=True)
            sent = netns.counters(name) - before
            assert sent.tx_bytes >= 1000 and sent.tx_packets >= 1
            raise KeyboardInterrupt  # Ctrl-C inside the block must still delete the namespace
    assert name not in netns.list_namespaces()


def test_names_are_unique_and_carry_the_prefix_and_pid():
    import os

    a, b = netns.unique_name("x"), netns.unique_name("x")
    assert a != b and a.startswith(f"sg-{os.getpid()}-")


def test_cleanup_stale_removes_only_namespaces_of_dead_creators():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"sg-{dead.pid}-1-stale"
    with netns.namespace("mine") as mine:
        netns.create(stale)
        try:
            removed = netns.cleanup_stale()
            assert stale in removed and mine not in removed
            assert mine in netns.list_namespaces() and stale not in netns.list_namespaces()
        finally:
            netns.delete(stale)


def test_a_failing_ip_command_names_itself_and_hints():
    with pytest.raises(netns.NetnsError) as info:
        netns.counters("sg-0-0-does-not-exist")
    assert "sg-0-0-does-not-exist" in str(info.value) and "HINT" in str(info.value)
