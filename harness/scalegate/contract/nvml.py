"""Which NVML device is a process's CUDA device ``i``: both sides read NVML, and the two count GPUs differently.

CUDA counts only the devices ``CUDA_VISIBLE_DEVICES`` names, in the order it names them; NVML counts every GPU of the
node, in PCI bus order. Under ``CUDA_VISIBLE_DEVICES=4,5,6,7`` a rank's ``cuda:0`` is NVML's GPU 4, and NVML's GPU 0
is another job's. So no reader takes a CUDA index as NVML's:

- a rank knows its device's UUID (torch's device properties) and finds NVML's handle by it (``locate(uuid=...)``),
  or through the environment as the gate does where NVML knows no such UUID;
- the gate makes no CUDA context, so it reads ``CUDA_VISIBLE_DEVICES`` as CUDA does (``visible``): unset, every GPU
  in NVML's order; indices, those NVML indices; ``GPU-``/``MIG-`` UUIDs or their unique prefixes, matched against
  NVML's UUIDs. CUDA orders unnamed devices fastest first and NVML by bus; on a node of one GPU model the two agree.

Where the devices cannot be told apart (an index NVML does not have, a prefix that names two GPUs), ``NvmlDeviceError``
says which and what to set, rather than a reading of some other GPU.
``nvml``: the pynvml module (a stand-in in unit tests, where no GPU exists). Imports nothing of scalegate's.
"""

from __future__ import annotations

import os
from typing import Any

PREFIXES = ("GPU-", "MIG-")
BY_UUID, BY_ENV = "UUID", "CUDA_VISIBLE_DEVICES"  # how ``locate`` found a device


class NvmlDeviceError(RuntimeError):
    """A CUDA device this process sees that NVML cannot be matched to."""


def locate(nvml: Any, cuda_index: int, uuid: str | None = None) -> tuple[Any, str]:
    """NVML's handle of this process's CUDA device ``cuda_index``, and how it was found (``BY_UUID`` or ``BY_ENV``):
    by ``uuid`` where the caller has it (with or without its ``GPU-``/``MIG-`` prefix), else, or where NVML knows no
    such UUID (a MIG instance under a driver that names it otherwise), through ``CUDA_VISIBLE_DEVICES``
    (``visible``)."""
    if uuid:
        names = [uuid] if uuid.startswith(PREFIXES) else [prefix + uuid for prefix in PREFIXES]
        for name in names:
            try:
                return nvml.nvmlDeviceGetHandleByUUID(name), BY_UUID
            except Exception:  # NVMLError_NotFound: try the other prefix, then the environment
                continue
    devices = visible(nvml)
    if not 0 <= cuda_index < len(devices):
        known = f" (NVML knows no GPU of its UUID {uuid})" if uuid else ""
        raise NvmlDeviceError(
            f"CUDA device {cuda_index}{known} is not among the {len(devices)} that CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')} names"
        )
    return devices[cuda_index], BY_ENV


def visible(nvml: Any) -> list[Any]:
    """NVML's handles of the CUDA devices this process sees, in CUDA's order (from ``CUDA_VISIBLE_DEVICES``)."""
    count = int(nvml.nvmlDeviceGetCount())
    named = parse(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if named is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    if not named or isinstance(named[0], int):
        missing = [n for n in named if int(n) >= count]
        if missing:
            raise NvmlDeviceError(
                f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} names GPU {missing[0]}, and NVML sees "
                f"{count}; name the GPUs by UUID (nvidia-smi -L) so both count the same devices"
            )
        return [nvml.nvmlDeviceGetHandleByIndex(int(n)) for n in named]
    uuids = [str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    return [_by_uuid(nvml, str(name), uuids) for name in named]


def parse(value: str | None) -> list[int] | list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: None where unset (every device); else indices, or UUIDs, as its
    first entry is, up to the first entry that is not of that kind (CUDA stops there)."""
    if value is None:
        return None
    entries = [e.strip() for e in value.split(",")]
    if entries[0].startswith(PREFIXES):
        uuids: list[str] = []
        for entry in entries:
            if not entry.startswith(PREFIXES):
                break
            uuids.append(entry)
        return uuids
    indices: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            break
        indices.append(int(entry))
    return indices


def _by_uuid(nvml: Any, name: str, uuids: list[str]) -> Any:
    try:
        return nvml.nvmlDeviceGetHandleByUUID(name)  # a whole UUID, a MIG instance's included
    except Exception:  # a prefix, as CUDA accepts one
        pass
    found = [i for i, uuid in enumerate(uuids) if uuid.startswith(name)]
    if len(found) != 1:
        raise NvmlDeviceError(
            f"CUDA_VISIBLE_DEVICES names {name}, which matches {len(found)} of NVML's GPUs ({', '.join(uuids)}); "
            "name each GPU by its whole UUID (nvidia-smi -L)"
        )
    return nvml.nvmlDeviceGetHandleByIndex(found[0])
