"""A cluster in the profile: two clusters with the same hardware and software keep apart baselines and history
series; a profile without one says so, and the committed baselines (no cluster) keep working."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scalegate.plan import hostinfo
from scalegate.record import baselines
from scalegate.report import run_page
from tests.conftest import ROOT

CPU = hostinfo.HostInfo(
    device="cpu",
    device_name="AMD EPYC",  # as this project's VMs name their CPU
    devices_per_node=2,
    cpu_model="AMD EPYC",
    cpu_cores=2,
    torch="2.13.0",
    cuda="none",
    nccl="none",
    hostname="vm",
)
GPU = dataclasses.replace(
    CPU, device="cuda", device_name="NVIDIA H100 80GB HBM3", devices_per_node=8, cuda="12.8", nccl="2.27.3"
)


@pytest.mark.parametrize(
    "environ, cluster",
    [
        ({}, ""),
        ({"SLURM_CLUSTER_NAME": "alps"}, "alps"),
        ({"SCALEGATE_CLUSTER": "Bern Lab", "SLURM_CLUSTER_NAME": "alps"}, "bern-lab"),  # the variable wins, a slug
        ({"SCALEGATE_CLUSTER": "", "SLURM_CLUSTER_NAME": "alps"}, ""),  # set and empty: none, even in a job
    ],
)
def test_the_cluster_comes_from_scalegate_cluster_else_slurms_cluster_name(environ, cluster):
    assert hostinfo.cluster_name(environ) == cluster


def test_detect_reads_the_cluster_from_the_environment(monkeypatch):
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "alps")
    monkeypatch.delenv("SCALEGATE_CLUSTER", raising=False)
    host = hostinfo.detect.__wrapped__()  # not the session's cached answer
    assert host.cluster == "alps" and host.profile.endswith("@alps") and host.cluster_note == "cluster alps"
    assert host.fingerprint()["cluster"] == "alps"


def test_two_clusters_with_the_same_hardware_have_two_profiles_and_parse_back():
    alps, bern = (dataclasses.replace(GPU, cluster=c) for c in ("alps", "bern"))
    assert alps.profile == "cuda-nvidia-h100-80gb-hbm3-x8-torch2.13.0-cuda12.8-nccl2.27.3@alps"
    assert alps.profile != bern.profile and alps.hardware == bern.hardware == "cuda-nvidia-h100-80gb-hbm3-x8"
    for host in (alps, GPU, CPU, dataclasses.replace(CPU, cluster="lab-2")):
        parts = hostinfo.parse_profile(host.profile)
        assert (parts.hardware, parts.cluster) == (host.hardware, host.cluster), host.profile
        assert parts.versions == (
            {"torch": "2.13.0"} | ({"cuda": "12.8", "nccl": "2.27.3"} if host.device == "cuda" else {})
        )
    assert hostinfo.parse_profile("p") == hostinfo.ProfileParts(hardware="p", cluster="", versions={})


def test_a_profile_without_a_cluster_is_unchanged_says_so_and_finds_the_committed_baseline():
    assert CPU.profile == "cpu-amd-epyc-2c-torch2.13.0" and CPU.cluster == ""
    assert CPU.cluster_note == "no cluster named (set SCALEGATE_CLUSTER, or run inside a SLURM job)"
    found = baselines.load(ROOT / "baselines", CPU.profile)
    assert found is not None and found.cases, "the CI VM's committed baseline is no longer found"
    for path in (ROOT / "baselines").glob("*.json"):  # every committed baseline names no cluster
        assert hostinfo.parse_profile(json.loads(path.read_text())["profile"]).cluster == ""
    page = run_page.data([{"profile": CPU.profile, "commit": "c"}], [], run="r", against="a", notes="")
    assert page["cluster"].startswith("no cluster named")


def test_a_run_records_the_versions_of_the_software_that_timed_it():
    found = hostinfo.versions(GPU)
    assert found["torch"] == "2.13.0" and found["cuda"] == "12.8" and found["nccl"] == "2.27.3"
    assert "cuda" not in hostinfo.versions(CPU) and "deepspeed" in found  # setup.sh installs DeepSpeed
