"""The swap pairing's rank side (docs/duet.md, "One resident job in turns of steps"): between its turns a job's
training state leaves device memory, and comes back before its next turn.

What is swapped is every tensor storage reachable from the optimizers the job has stepped: the parameters, their
gradients and the optimizer's state (torch's global optimizer step hooks find them, so a team's unchanged script is
swapped as scalegate's own workloads are: DeepSpeed's, Accelerate's and Lightning's optimizers end in a torch
optimizer). A storage is copied to a host buffer (pinned on CUDA, kept for the next swap of that size) and resized
to nothing, as FSDP frees an unsharded parameter: every tensor and view of it stays the same Python object, and
the swap-in resizes it back and copies its bytes home. Storages shared by several tensors (tied weights, a flat
buffer's views) move once. On CUDA the caching allocator's free blocks are then given back to the driver
(``empty_cache``), so the partner job can allocate them.

What stays resident: what no optimizer reaches (module buffers, DDP's gradient buckets, DeepSpeed's or FSDP's
communication buffers, the CUDA context and NCCL's own memory), host storages of a device job (an offloaded
optimizer's state is out already), and a storage that cannot be resized (one that wraps memory it does not own);
the summary counts the last, and on CUDA what the idle rank held in all: its caching allocator's reserve, and its
whole process by NVML's count (the figure a partner's turn must fit beside). The optimizers are those the rank's
thread has stepped, and those its loop names (``follow``: scalegate's own workloads name theirs before the first
step).

On CPU the host buffer is the same memory as the storage's, so freeing would gain nothing, and would measure the host
allocator's way of making memory again rather than a GPU's: a CPU job's swap copies its storages out and back and
keeps them (``FREE_ON_CPU``; docs/evidence/swap.md#the-turns-and-the-copies). Worker side.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import weakref
from typing import Any, Callable, Iterator

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from scalegate.measure.memory import process_reader


class Swap:
    """One rank's swap: ``out()`` when it gives its turn back, ``back()`` when it is granted the next. ``owner``: the
    rank's thread, whose optimizer steps it follows (another thread's optimizers are not this rank's)."""

    FREE_ON_CPU = False  # a CPU job's storages are copied and kept (the tests free them to check the mechanism)

    def __init__(self, owner: int | None = None) -> None:
        self.owner = threading.get_ident() if owner is None else owner
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.swapped: list[tuple[torch.UntypedStorage, torch.Tensor, bool]] = []  # (storage, host copy, freed)
        self.pool: dict[tuple[int, bool], list[torch.Tensor]] = {}  # free host buffers by (bytes, pinned)
        self.swaps = 0  # swap-outs that moved something
        self.bytes = 0  # the most bytes one swap-out moved
        self.kept_bytes = 0  # reachable, not resizable: stayed resident
        self.freed = False  # a swap-out freed what it copied (a device job's; a CPU job's copies are kept)
        # what stayed in the rank's CUDA caching allocator after a swap-out, the most of any (None off CUDA): the
        # tensors no optimizer reaches (DDP's buckets, module buffers) and blocks empty_cache could not give back;
        # the CUDA context and NCCL's own buffers are outside the allocator and not counted
        self.idle_reserved: int | None = None
        self.idle_allocated: int | None = None
        # what the idle rank's process held on its GPUs after a swap-out by NVML's count, the most of any: the
        # allocator's share above plus the CUDA context and NCCL's buffers, what the partner's turn must fit beside
        # (None off CUDA, without NVML, or where NVML does not list the rank's pid)
        self.idle_device: int | None = None
        self.readers: dict[int, Callable[[], int | None] | None] = {}  # NVML's reader per GPU index, made once
        self.out_s: list[float] = []
        self.back_s: list[float] = []
        self.hook = register_optimizer_step_pre_hook(self._seen)

    def _seen(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self.owner:
            self.optimizers.add(optimizer)

    def follow(self, optimizer: Any) -> None:
        """Swap what ``optimizer`` reaches from the next turn on, before it has stepped (a torch optimizer only)."""
        if isinstance(optimizer, torch.optim.Optimizer):
            self.optimizers.add(optimizer)

    def storages(self) -> list[torch.UntypedStorage]:
        """The live storages the job's optimizers reach, each once: a device job's device storages, a CPU job's
        host storages."""
        seen: dict[int, torch.UntypedStorage] = {}
        for optimizer in list(self.optimizers):
            for tensor in _tensors(optimizer):
                storage = tensor.untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in seen:
                    seen[storage.data_ptr()] = storage
        found = list(seen.values())
        on_device = [storage for storage in found if storage.device.type != "cpu"]
        return on_device or found

    def out(self) -> None:
        """Copy every reachable storage to a host buffer and free it on the device (on CPU: keep it)."""
        started = time.perf_counter()
        moved, kept, devices = 0, 0, set()
        for storage in self.storages():
            free = storage.device.type != "cpu" or self.FREE_ON_CPU
            if free and not storage.resizable():
                kept += storage.nbytes()
                continue
            host = self._host(storage.nbytes(), storage.device.type == "cuda")
            host.copy_(_bytes(storage), non_blocking=host.is_pinned())
            self.swapped.append((storage, host, free))
            devices.add(storage.device)
            moved += storage.nbytes()
        for device in devices:
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the copies landed before the storages go
        for storage, _, free in self.swapped:
            if free:
                storage.resize_(0)
                self.freed = True
        cuda = sorted({device for device in devices if device.type == "cuda"}, key=str)
        if cuda:
            torch.cuda.empty_cache()  # the freed blocks back to the driver: the partner job allocates them
            reserved = sum(int(torch.cuda.memory_reserved(device)) for device in cuda)
            allocated = sum(int(torch.cuda.memory_allocated(device)) for device in cuda)
            self.idle_reserved = max(self.idle_reserved or 0, reserved)
            self.idle_allocated = max(self.idle_allocated or 0, allocated)
            held = [self._held(device) for device in cuda]
            if all(value is not None for value in held):
                self.idle_device = max(self.idle_device or 0, sum(value or 0 for value in held))
        self.kept_bytes = max(self.kept_bytes, kept)
        if moved:
            self.swaps += 1
            self.bytes = max(self.bytes, moved)
            self.out_s.append(time.perf_counter() - started)

    def back(self) -> None:
        """Resize every swapped storage back and copy its bytes home."""
        if not self.swapped:
            return
        started = time.perf_counter()
        devices = set()
        for storage, host, free in self.swapped:
            if free:
                storage.resize_(host.numel())
            _bytes(storage).copy_(host, non_blocking=host.is_pinned())
            devices.add(storage.device)
        for device in devices:
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # home before the step that reads them
        for _, host, _ in self.swapped:
            self.pool.setdefault((host.numel(), host.is_pinned()), []).append(host)
        self.swapped.clear()
        self.back_s.append(time.perf_counter() - started)

    def _held(self, device: torch.device) -> int | None:
        """What NVML says this process holds on ``device`` now (None where it cannot say)."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in self.readers:
            self.readers[index] = process_reader(index, os.getpid())
        reader = self.readers[index]
        return reader() if reader is not None else None

    def _host(self, nbytes: int, pinned: bool) -> torch.Tensor:
        free = self.pool.get((nbytes, pinned))
        if free:
            return free.pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)

    def close(self) -> None:
        self.hook.remove()

    def summary(self) -> dict[str, Any]:
        """What the rank's result says of its swaps: how many, the bytes a swap moved, their median seconds, and what
        stayed on the GPU while the job was swapped out, in the CUDA allocator and in the whole process by NVML
        (None off CUDA)."""
        return {
            "swaps": self.swaps,
            "swap_bytes": self.bytes,
            "kept_bytes": self.kept_bytes,
            "swap_out_s": _median(self.out_s),
            "swap_in_s": _median(self.back_s),
            "freed": self.freed,
            "idle_reserved_bytes": self.idle_reserved,
            "idle_allocated_bytes": self.idle_allocated,
            "idle_device_bytes": self.idle_device,
        }


def _tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        for param in group["params"]:
            yield param
            if param.grad is not None:
                yield param.grad
    for state in optimizer.state.values():
        yield from _nested(state)


def _nested(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _nested(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _nested(item)


def _bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 6) if values else None
