"""A private network namespace per single-node job, so its loopback counts exactly its bytes.

The job's torchrun runs under ``ip netns exec`` in a fresh namespace with ``lo`` up; the workers
read ``lo``'s tx counter at the edges of their measured window (harness/scalegate/measure/wire.py). Where no
namespace can be made (not root, no iproute2) or the job spans emulated nodes, the job runs as
before and its result says why bytes on the wire are unavailable.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from scalegate.contract.spec import CaseSpec
from scalegate.launch import netns

ENV_IFACE = "SCALEGATE_WIRE_IFACE"  # the worker side reads these (harness/scalegate/measure/wire.py)
ENV_UNAVAILABLE = "SCALEGATE_WIRE_UNAVAILABLE"
ENV_DISABLE = "SCALEGATE_NO_NETNS"  # set to 1 to launch in the root namespace (bytes unavailable)


def unavailable(spec: CaseSpec) -> str | None:
    if os.environ.get(ENV_DISABLE) == "1":
        return f"{ENV_DISABLE}=1: the job ran in the root network namespace"
    if spec.topo.multi_node:
        return "multi-node jobs are counted per node by their launcher, not by a loopback namespace"
    return netns.available()


@contextlib.contextmanager
def private_network(spec: CaseSpec) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(argv prefix, extra environment) for the job; the namespace is deleted on exit."""
    reason = unavailable(spec)
    if reason:
        yield [], {ENV_UNAVAILABLE: reason}
        return
    with netns.namespace(spec.case_id) as name:
        yield netns.exec_prefix(name), {ENV_IFACE: "lo"}
