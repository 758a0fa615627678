"""The setup's choice of CUDA torch: a pure function of the driver's CUDA version, checked without a GPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.plan import cuda_wheel
from scalegate.plan.cuda_wheel import WheelError, choose, driver_cuda_version

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "harness" / "scalegate" / "plan" / "cuda_wheel.py"
# nvidia-smi's header as a 570-series driver prints it
NVIDIA_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
"""


@pytest.mark.parametrize(
    "driver, tag",
    [("12.6", "cu126"), ("12.7", "cu126"), ("12.8", "cu128"), ("12.9", "cu128"), ("13.0", "cu130"), ("13.2", "cu130")],
)
def test_the_newest_build_the_driver_runs_is_chosen_pinned(driver, tag):
    wheel = choose(driver)
    assert wheel.tag == tag
    assert wheel.pip_args() == ["torch==2.13.0", "--index-url", f"https://download.pytorch.org/whl/{tag}"]


@pytest.mark.parametrize("driver", ["12.4", "11.8", "10.2"])
def test_a_driver_older_than_every_build_is_refused_with_a_hint(driver):
    with pytest.raises(WheelError) as caught:
        choose(driver)
    assert f"runs CUDA {driver} at most" in caught.value.message
    assert "cu126, cu128, cu130" in caught.value.message
    assert "CUDA Version: 12.6" in caught.value.hint and "./setup.sh" in caught.value.hint


@pytest.mark.parametrize("text", ["", "twelve", "12", "12.x"])
def test_a_version_that_is_not_major_minor_is_refused(text):
    with pytest.raises(WheelError, match="is not MAJOR.MINOR"):
        choose(text)


def test_the_driver_version_is_read_from_nvidia_smis_header():
    assert driver_cuda_version(NVIDIA_SMI) == "12.8"
    with pytest.raises(WheelError, match="no 'CUDA Version"):
        driver_cuda_version("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def _script(stdin: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, as setup.sh runs it with the system python before anything is installed
    return subprocess.run(
        [sys.executable, "-S", str(SCRIPT), "-"], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_setup_sh_gets_the_pip_arguments_one_a_line_from_the_standalone_script():
    done = _script(NVIDIA_SMI)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cu128"]


def test_the_script_refuses_an_old_driver_in_one_error_line_and_its_hint():
    done = _script(NVIDIA_SMI.replace("CUDA Version: 12.8", "CUDA Version: 12.2"))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: the driver runs CUDA 12.2") and lines[1].startswith("HINT:")


def test_setup_sh_pins_the_same_torch_on_cpu_and_cuda_and_asks_the_script():
    setup = (ROOT / "setup.sh").read_text()
    assert re.search(r"^TORCH_CPU_VERSION=(\S+)$", setup, re.M).group(1) == cuda_wheel.TORCH_VERSION
    assert "harness/scalegate/plan/cuda_wheel.py" in setup
