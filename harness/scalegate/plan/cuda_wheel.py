"""Which CUDA build of the pinned torch this machine's NVIDIA driver can run: a pure function of the driver.

    python3 harness/scalegate/plan/cuda_wheel.py            # reads nvidia-smi; prints the pip arguments, one a line
    nvidia-smi | python3 harness/scalegate/plan/cuda_wheel.py -   # the same from a saved nvidia-smi output

``setup.sh`` runs this file with the system python before the suite (or torch) is installed, so it imports
nothing but the standard library. The driver's ``CUDA Version`` (nvidia-smi's header) is the newest CUDA runtime
it runs; a wheel built for that runtime or an older one works, a newer one fails at the first kernel. So the
choice is the newest build of ``TORCH_VERSION`` whose CUDA is at most the driver's; a driver older than every
build is refused with a HINT, never answered with a wheel that cannot start. Exit codes of the script: 0 with
the arguments on stdout, 2 with one error line and its HINT on stderr.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

TORCH_VERSION = "2.13.0"  # setup.sh's CPU pin: the CUDA wheel is the same release
INDEX = "https://download.pytorch.org/whl/"
# The CUDA builds published for TORCH_VERSION, (major, minor) -> the index's tag, oldest first.
CUDA_BUILDS: tuple[tuple[tuple[int, int], str], ...] = (((12, 6), "cu126"), ((12, 8), "cu128"), ((13, 0), "cu130"))
DRIVER_HINT = (
    "upgrade the NVIDIA driver to one whose nvidia-smi reports 'CUDA Version: {oldest}' or newer, or install a "
    "CUDA torch that this driver runs into .venv yourself (.venv/bin/pip install torch==<version> --index-url "
    f"{INDEX}cu<NNN>) and run ./setup.sh again: it keeps an installed torch"
)


class WheelError(ValueError):
    """No CUDA torch can be chosen for this driver: the message names the driver's version, ``hint`` what to do."""

    def __init__(self, message: str, hint: str) -> None:
        self.message, self.hint = message, hint
        super().__init__(f"{message}\nHINT: {hint}")


@dataclass(frozen=True, kw_only=True)
class Wheel:
    requirement: str  # torch==2.13.0
    tag: str  # cu128
    index_url: str

    def pip_args(self) -> list[str]:
        """What follows ``pip install``: the pinned requirement from its CUDA index only."""
        return [self.requirement, "--index-url", self.index_url]


def parse_version(text: str) -> tuple[int, int]:
    """'12.8' -> (12, 8); anything else is a WheelError naming the text."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", text or "")
    if not match:
        raise WheelError(
            f"driver CUDA version {text!r} is not MAJOR.MINOR",
            "pass the 'CUDA Version' nvidia-smi prints in its header, e.g. 12.8",
        )
    return int(match.group(1)), int(match.group(2))


def driver_cuda_version(nvidia_smi: str) -> str:
    """The 'CUDA Version: 12.8' of nvidia-smi's header, as '12.8'."""
    match = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", nvidia_smi or "")
    if not match:
        raise WheelError(
            "nvidia-smi's output has no 'CUDA Version: X.Y' (no driver loaded, or an unexpected format)",
            "run nvidia-smi by hand: it must list the GPUs under a header naming the driver and CUDA versions",
        )
    return match.group(1)


def choose(driver_cuda: str, torch_version: str = TORCH_VERSION) -> Wheel:
    """The newest CUDA build of ``torch_version`` a driver reporting ``driver_cuda`` runs."""
    driver = parse_version(driver_cuda)
    fitting = [tag for version, tag in CUDA_BUILDS if version <= driver]
    if not fitting:
        oldest = "%d.%d" % CUDA_BUILDS[0][0]
        builds = ", ".join(tag for _, tag in CUDA_BUILDS)
        raise WheelError(
            f"the driver runs CUDA {driver_cuda} at most; torch {torch_version}'s CUDA builds ({builds}) need "
            f"{oldest} or newer",
            DRIVER_HINT.format(oldest=oldest),
        )
    return Wheel(requirement=f"torch=={torch_version}", tag=fitting[-1], index_url=INDEX + fitting[-1])


def read_nvidia_smi() -> str:
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise WheelError(
            f"nvidia-smi could not run ({type(exc).__name__}: {exc}): no NVIDIA driver here",
            "run this on a machine with an NVIDIA GPU and its driver; on a CPU machine ./setup.sh installs the CPU "
            f"wheel torch=={TORCH_VERSION}",
        ) from None
    if done.returncode != 0:
        raise WheelError(
            f"nvidia-smi exited {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}",
            "check that the NVIDIA driver is loaded (nvidia-smi must list the GPUs)",
        )
    return done.stdout


def main(argv: list[str]) -> int:
    try:
        text = sys.stdin.read() if argv[:1] == ["-"] else read_nvidia_smi()
        wheel = choose(driver_cuda_version(text))
    except WheelError as exc:
        print(f"error: {exc.message}\nHINT: {exc.hint}", file=sys.stderr)
        return 2
    print("\n".join(wheel.pip_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
