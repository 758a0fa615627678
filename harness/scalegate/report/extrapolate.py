"""An alpha-beta projection of efficiency at 8..1024 devices from one measured case.

    T(N) = T_compute + k * (N - 1) * alpha + V(N) / beta,   efficiency(N) = T_compute / T(N)

- ``T_compute``: the single-process 1x1 median step time of the same model and preset (weak scaling:
  every device keeps that much work per step).
- ``V(N)``: bytes one rank sends per step at N devices, scaled from the measured bytes per rank at
  the case's W by the ring factor ((N-1)/N) / ((W-1)/W). Without a counter reading, the analytic volume.
- ``alpha`` latency per message, ``k`` messages per ring step (gradient buckets x 2 phases), ``beta``
  link bandwidth. No overlap of communication with compute: a lower bound for DDP, which overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEVICES = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, kw_only=True)
class Link:
    bandwidth_gbit_s: float = 100.0  # per device, e.g. one 100 Gbit/s NIC per GPU
    latency_us: float = 5.0
    messages_per_hop: int = 2  # reduce-scatter + all-gather phases of a ring, one gradient bucket

    def describe(self) -> str:
        return (
            f"link {self.bandwidth_gbit_s:g} Gbit/s per device, latency {self.latency_us:g} µs per message, "
            f"{self.messages_per_hop} message(s) per ring hop, no compute/communication overlap"
        )


@dataclass(frozen=True, kw_only=True)
class Projection:
    case_id: str
    compute_s: float
    bytes_per_rank: float
    measured_world: int
    source: str
    efficiency: dict[int, float]


def project(
    compute_s: float, bytes_per_rank: float, measured_world: int, link: Link, devices: tuple[int, ...] = DEVICES
) -> dict[int, float]:
    if compute_s <= 0 or measured_world < 2:
        raise ValueError("needs a positive compute time and a measured world size of 2 or more")
    base_factor = (measured_world - 1) / measured_world
    out = {}
    for n in devices:
        volume = bytes_per_rank * ((n - 1) / n) / base_factor
        comm = link.messages_per_hop * (n - 1) * link.latency_us * 1e-6 + volume * 8 / (link.bandwidth_gbit_s * 1e9)
        out[n] = compute_s / (compute_s + comm)
    return out


def from_case(case: dict[str, Any], link: Link) -> Projection | None:
    """A projection for a multi-rank case with a reference time and a byte count; None otherwise."""
    result = case.get("result") or {}
    world = len(result.get("ranks", []))
    ref_steps = case.get("reference_step_times_s") or []
    wire = (case.get("resources") or {}).get("wire") or {}
    if world < 2 or case.get("status") == "failed":
        return None
    if ref_steps:
        compute = sorted(ref_steps)[len(ref_steps) // 2]
    elif case.get("reference_throughput") and result.get("throughput") and result.get("median_step_s"):
        batch_per_rank = result["throughput"] * result["median_step_s"] / world
        compute = batch_per_rank / case["reference_throughput"]
    else:
        return None
    if wire.get("bytes_per_rank"):
        volume, source = float(wire["bytes_per_rank"]), f"measured ({wire.get('source', '?')})"
    elif wire.get("analytic_bytes_per_rank"):
        volume, source = float(wire["analytic_bytes_per_rank"]), "analytic (no counter reading)"
    else:
        return None
    return Projection(
        case_id=case["case_id"],
        compute_s=compute,
        bytes_per_rank=volume,
        measured_world=world,
        source=source,
        efficiency=project(compute, volume, world, link),
    )


def markdown(projections: list[Projection], link: Link) -> str:
    if not projections:
        return (
            "No projection: no multi-rank case in this run has both a reference step time and bytes per "
            "step (run with the wire counters on, or a strategy that declares its analytic volume).\n"
        )
    lines = [
        f"Assumptions: {link.describe()}; weak scaling with the 1x1 step time as compute; "
        "ring collectives, so a rank's bytes grow as (N-1)/N.",
        "",
        "| case | compute ms | MB/rank/step (W) | source | " + " | ".join(str(n) for n in DEVICES) + " |",
        "|---|--:|--:|---|" + "--:|" * len(DEVICES),
    ]
    for p in projections:
        cells = " | ".join(f"{p.efficiency[n]:.2f}" for n in DEVICES)
        lines.append(
            f"| `{p.case_id}` | {p.compute_s * 1e3:.1f} | {p.bytes_per_rank / 1e6:.2f} ({p.measured_world}) | "
            f"{p.source} | {cells} |"
        )
    return "\n".join(lines) + "\n"
