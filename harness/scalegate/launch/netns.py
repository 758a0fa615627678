"""Linux network namespaces for the harness: create, count bytes, run inside, always clean up.

Every call runs ``ip`` with an argument list (never a shell string) and raises ``NetnsError``
(a ``LaunchError`` with a HINT) when it fails. Names share the prefix ``sg-`` and embed the
creating process's pid, ``sg-<pid>-<seq>[-<tag>]``, so pytest-xdist workers never collide and
``cleanup_stale()`` can tell which leftovers belong to a process that is gone.

API::

    available() -> str | None            # None when namespaces can be made here, else why not
                                         # (SCALEGATE_NO_NETNS=1 forces "not available", e.g. to test fallbacks)
    unique_name(tag="") -> str           # "sg-4242-3-n0": unique per process and call
    create(name) / delete(name)          # add with `lo` up / remove (a missing one is fine)
    exec_prefix(name) -> list[str]       # ["ip", "netns", "exec", name]: prepend to an argv
    counters(name, ifname="lo") -> Counters(rx_bytes, tx_bytes, rx_packets, tx_packets)
    namespace(tag="") -> ContextManager[str]   # one namespace, deleted on exit/exception/Ctrl-C
    Scope()  (context manager)           # .create(tag) many; all deleted on exit, newest first
    list_namespaces(prefix="sg-") -> list[str]
    cleanup_stale() -> list[str]         # delete sg-* namespaces whose creator pid is gone

Counting a single-node job's traffic on its own loopback::

    with netns.namespace("lo-count") as ns:
        before = netns.counters(ns)
        process.run(netns.exec_prefix(ns) + torchrun_argv, ...)
        sent = netns.counters(ns).tx_bytes - before.tx_bytes

Deleting a namespace destroys its interfaces (and the veth peers of those), so a scope that
holds every namespace it made leaves nothing behind in the root namespace.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil

from scalegate.contract.errors import LaunchError

PREFIX = "sg-"
NETNS_DIR = Path("/run/netns")
_NAME = re.compile(r"^sg-(\d+)-\d+(?:-[A-Za-z0-9_.-]+)?$")
_SEQ = itertools.count(1)
_available: str | None | bool = False  # False: not probed yet


class NetnsError(LaunchError):
    """An ``ip``/``tc`` command on namespaces failed."""


@dataclass(frozen=True, kw_only=True)
class Counters:
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int

    def __sub__(self, other: "Counters") -> "Counters":
        return Counters(
            rx_bytes=self.rx_bytes - other.rx_bytes,
            tx_bytes=self.tx_bytes - other.tx_bytes,
            rx_packets=self.rx_packets - other.rx_packets,
            tx_packets=self.tx_packets - other.tx_packets,
        )


def run_ip(args: list[str], *, tool: str = "ip", check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS`` (or ``tc ARGS``); raise NetnsError naming the command and its stderr."""
    argv = [tool, *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise NetnsError(f"{tool} is not installed ({exc})", "apt-get install -y iproute2") from exc
    if check and done.returncode != 0:
        raise NetnsError(
            f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}",
            "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2",
        )
    return done


def available() -> str | None:
    """None if this process can create namespaces; otherwise the reason (probed once, cached)."""
    global _available
    if os.environ.get("SCALEGATE_NO_NETNS"):
        return f"network namespaces disabled (SCALEGATE_NO_NETNS={os.environ['SCALEGATE_NO_NETNS']})"
    if _available is not False:
        return _available  # type: ignore[return-value]
    if shutil.which("ip") is None:
        _available = "iproute2 (`ip`) is not installed"
    elif os.geteuid() != 0:
        _available = "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    else:
        probe = unique_name("probe")
        try:
            create(probe)
            _available = None
        except NetnsError as exc:
            _available = f"cannot create a network namespace: {exc.message}"
        finally:
            delete(probe)
    return _available  # type: ignore[return-value]


def unique_name(tag: str = "") -> str:
    """``sg-<pid>-<seq>[-<tag>]``; the tag is for humans reading `ip netns list`."""
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)[:40]
    return f"{PREFIX}{os.getpid()}-{next(_SEQ)}" + (f"-{tag}" if tag else "")


def create(name: str) -> None:
    """Add namespace ``name`` with its loopback up (processes inside can use 127.0.0.1)."""
    run_ip(["netns", "add", name])
    try:
        run_ip(["-n", name, "link", "set", "lo", "up"])
    except NetnsError:
        delete(name)
        raise


def delete(name: str) -> None:
    """Remove namespace ``name`` and every interface in it; a namespace already gone is fine."""
    if shutil.which("ip") is None:
        return
    run_ip(["netns", "delete", name], check=False)


def exec_prefix(name: str) -> list[str]:
    """The argv prefix that runs a command inside namespace ``name``."""
    return ["ip", "netns", "exec", name]


def counters(name: str, ifname: str = "lo") -> Counters:
    """rx/tx byte and packet counters of ``ifname`` inside namespace ``name``."""
    done = run_ip(["-n", name, "-s", "-j", "link", "show", "dev", ifname])
    try:
        stats = json.loads(done.stdout)[0]["stats64"]
        return Counters(
            rx_bytes=int(stats["rx"]["bytes"]),
            tx_bytes=int(stats["tx"]["bytes"]),
            rx_packets=int(stats["rx"]["packets"]),
            tx_packets=int(stats["tx"]["packets"]),
        )
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise NetnsError(
            f"unreadable counters for {ifname} in {name}: {done.stdout[:200]!r}",
            "iproute2 >= 5.0 is needed for `ip -s -j link`",
        ) from exc


def list_namespaces(prefix: str = PREFIX) -> list[str]:
    """Names of existing namespaces starting with ``prefix``."""
    if shutil.which("ip") is None:
        return []
    done = run_ip(["-j", "netns", "list"], check=False)
    try:
        names = [entry["name"] for entry in json.loads(done.stdout or "[]")]
    except (ValueError, KeyError, TypeError):
        names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))


def cleanup_stale() -> list[str]:
    """Delete ``sg-*`` namespaces whose creator is gone (pid dead, or reused after creation)."""
    removed = []
    for name in list_namespaces():
        match = _NAME.match(name)
        if match and not _creator_alive(int(match.group(1)), name):
            delete(name)
            removed.append(name)
    return removed


def _creator_alive(pid: int, name: str) -> bool:
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    try:  # a pid reused by a process that started after the namespace was made is not its creator
        return started <= (NETNS_DIR / name).stat().st_mtime + 1.0
    except OSError:
        return True


class Scope:
    """Namespaces made through ``create()`` are all deleted on exit, newest first, whatever happens."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def create(self, tag: str = "") -> str:
        name = unique_name(tag)
        self.names.append(name)  # recorded first: a half-made namespace is deleted too
        create(name)
        return name

    def close(self) -> None:
        while self.names:
            delete(self.names.pop())

    def __enter__(self) -> "Scope":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def namespace(tag: str = "") -> Iterator[str]:
    """One fresh namespace with ``lo`` up; deleted on exit, on exceptions and on Ctrl-C."""
    with Scope() as scope:
        yield scope.create(tag)
