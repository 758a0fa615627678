"""A device's peak dense FLOP/s, the denominator of MFU (launching side).

GPUs: a table of vendors' datasheet figures per dtype, dense (without 2:4 sparsity; the datasheets' headline
tensor figures are "with sparsity", twice these). The bf16 figures are the ones torchtitan uses
(``torchtitan/tools/utils.py``, ``get_peak_flops``); the fp32 ones are the plain FP32 (not TF32) rows of the
same datasheets, what a matmul computes under torch's default ``allow_tf32=False``. A GPU the table does not
know, or a dtype without a figure, gets no peak and says why (MFU ``n/a``): never a guessed one.

CPUs: there is no datasheet figure worth the name for a shared VM core, so the peak is *measured*, once per
session and process, by a matmul microbenchmark on as many threads as a rank uses, and labelled as measured.
MFU on a CPU says how close the step comes to the best matmul this host delivers now, not to silicon.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

# (substring of torch.cuda.get_device_name(), upper-cased; first match wins: specific variants first,
#  {dtype: dense FLOP/s}, source)
GPU_PEAKS: tuple[tuple[str, dict[str, float], str], ...] = (
    ("H100 NVL", {"bf16": 835e12, "fp32": 60e12}, "NVIDIA H100 datasheet (NVL), dense"),
    ("H100 PCIE", {"bf16": 756e12, "fp32": 51e12}, "NVIDIA H100 datasheet (PCIe), dense"),
    ("H100", {"bf16": 989e12, "fp32": 67e12}, "NVIDIA H100 datasheet (SXM), dense"),
    ("H200 NVL", {"bf16": 835e12, "fp32": 60e12}, "NVIDIA H200 datasheet (NVL), dense"),
    ("H200", {"bf16": 989e12, "fp32": 67e12}, "NVIDIA H200 datasheet (SXM), dense"),
    ("B200", {"bf16": 2.25e15}, "NVIDIA Blackwell datasheet (HGX B200 per GPU), dense; torchtitan's figure"),
    ("A100", {"bf16": 312e12, "fp32": 19.5e12}, "NVIDIA A100 datasheet, dense"),
    ("L40S", {"bf16": 362e12, "fp32": 91.6e12}, "NVIDIA L40S datasheet; torchtitan's bf16 figure"),
    ("V100", {"fp32": 15.7e12}, "NVIDIA V100 datasheet (SXM2); no bf16 on Volta"),
    ("MI325X", {"bf16": 1300e12, "fp32": 163.4e12}, "AMD Instinct MI325X datasheet, dense; torchtitan's bf16 figure"),
    ("MI300X", {"bf16": 1300e12, "fp32": 163.4e12}, "AMD Instinct MI300X datasheet, dense; torchtitan's bf16 figure"),
    ("MI250X", {"bf16": 191.5e12, "fp32": 47.9e12}, "AMD Instinct MI250X datasheet, per GCD"),
)


@dataclass(frozen=True, kw_only=True)
class Peak:
    """Dense FLOP/s of one device (one rank) at the case's dtype; ``flops`` None says why in ``source``."""

    flops: float | None
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"flops": self.flops, "source": self.source}


def gpu_peak(device_name: str, dtype: str) -> Peak:
    name = device_name.upper()
    for key, figures, source in GPU_PEAKS:
        if key in name:
            if dtype in figures:
                return Peak(flops=figures[dtype], source=f"{source}: {figures[dtype] / 1e12:g} TFLOP/s {dtype}")
            return Peak(
                flops=None,
                source=f"n/a: the peak table has no {dtype} figure for {device_name} "
                f"(harness/scalegate/figures/peaks.py GPU_PEAKS)",
            )
    return Peak(
        flops=None,
        source=f"n/a: {device_name!r} is not in the peak table (harness/scalegate/figures/peaks.py GPU_PEAKS); "
        "add its dense datasheet figure there",
    )


@functools.lru_cache(maxsize=None)
def cpu_peak(threads: int, dtype: str, size: int = 512, repeats: int = 5, seconds: float = 0.05) -> Peak:
    """The best of ``repeats`` timed bursts of ``size``-square matmuls on ``threads`` threads (once per process).

    ~0.3 s for fp32 here; bf16, which these CPUs emulate at ~0.4 GFLOP/s, ~3 s (one matmul a burst)."""
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size, dtype=torch_dtype)
        b = torch.randn(size, size, dtype=torch_dtype)
        torch.mm(a, b)  # first call: kernel selection and packing buffers
        best = 0.0
        for _ in range(repeats):
            count, start = 0, time.perf_counter()
            while True:
                torch.mm(a, b)
                count += 1
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
            best = max(best, 2 * size**3 * count / elapsed)
    finally:
        torch.set_num_threads(before)
    return Peak(
        flops=best,
        source=f"measured: best {size}x{size} {dtype} matmul on {threads} thread(s), {best / 1e9:.1f} GFLOP/s",
    )


def peak_for(device: str, device_name: str, dtype: str, threads: int) -> Peak:
    """The peak of one rank's device: ``device`` "cuda" or "cpu" (HostInfo.device), ``threads`` on CPU."""
    if device == "cuda":
        return gpu_peak(device_name, dtype)
    return cpu_peak(max(1, threads), dtype)


def mfu(
    flops_per_step: float | None, samples_per_s: float, global_batch: int, world_size: int, peak: float | None
) -> tuple[float | None, float | None]:
    """(achieved FLOP/s per device, MFU): the counted step's FLOPs at the measured throughput, shared by W devices."""
    if not flops_per_step or global_batch <= 0 or world_size <= 0:
        return None, None
    achieved = flops_per_step / global_batch * samples_per_s / world_size
    return achieved, (achieved / peak if peak else None)
