"""The launcher protocol without launching: the registry, the choice, and each launcher's argument list."""

from __future__ import annotations

import pytest

from scalegate import launch, workloads
from scalegate.contract.errors import LaunchError, SpecError
from scalegate.contract.spec import CaseSpec
from scalegate.launch import Job, Settings, local, warm
from scalegate.launch.wirecount import ENV_DISABLE
from scalegate.plan import cluster

STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_CPUS_ON_NODE": "16",
}


def spec(topology: str = "1x2") -> CaseSpec:
    micro_batch = workloads.preset("cnn", "tiny").micro_batch
    return CaseSpec(strategy="ddp", model="cnn", preset="tiny", topology=topology, micro_batch=micro_batch)


def job(tmp_path, topology: str = "1x2", **changes) -> Job:
    paths = dict(spec_path=tmp_path / "spec.json", out_dir=tmp_path / "ranks", log_dir=tmp_path / "logs")
    return Job(spec=spec(topology), port=29500, **paths, **changes)


def test_every_launcher_registers_itself_by_name():
    assert set(launch.names()) == {"torchrun", "warm", "emulated", "slurm"}
    assert all(launch.get(name).name == name for name in launch.names())


def test_an_unknown_launcher_names_the_known_ones():
    with pytest.raises(SpecError) as info:
        launch.get("mpirun")
    assert "unknown launcher 'mpirun'" in str(info.value) and "HINT: pick one of: " in str(info.value)


def test_a_second_launcher_under_a_taken_name_is_refused():
    with pytest.raises(LaunchError) as info:

        @launch.register_launcher("torchrun")
        class Another(local.TorchrunLauncher):
            pass

    assert "is taken by scalegate.launch.local.TorchrunLauncher" in str(info.value) and "HINT" in str(info.value)
    assert launch.get("torchrun") is local.TorchrunLauncher


def test_multi_node_cases_launch_where_they_run_single_node_ones_as_the_option_says():
    slurm = cluster.detect(STEP)
    assert launch.choose(spec("1x2"), None, "warm") == "warm"
    assert launch.choose(spec("1x2"), slurm, "torchrun") == "torchrun"  # under srun too: node 0 runs it alone
    assert launch.choose(spec("2x1"), None, "warm") == "emulated"
    assert launch.choose(spec("2x1"), slurm, "warm") == "slurm"


def test_the_cold_and_emulated_launchers_start_torchrun_and_the_warm_one_hands_its_agent_the_arguments(tmp_path):
    settings = Settings(python="/py")
    cold = launch.get("torchrun")(settings).command(job(tmp_path))
    assert cold[:3] == ["/py", "-m", "torch.distributed.run"] and all(isinstance(a, str) for a in cold)
    assert launch.get("warm")(settings).command(job(tmp_path)) == cold[3:]
    node = job(tmp_path, "2x1", node_rank=1, master_addr="198.18.0.1")
    argv = launch.get("emulated")(settings).command(node)
    assert " --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 198.18.0.1 --master-port 29500" in " ".join(argv)


def test_the_slurm_launcher_needs_a_step_and_waits_for_node_0(tmp_path):
    with pytest.raises(LaunchError) as info:
        launch.get("slurm")().job(spec("2x1"), tmp_path / "spec.json", tmp_path / "ranks", tmp_path / "logs")
    assert "srun --ntasks-per-node=1" in str(info.value)
    launcher = launch.get("slurm")(Settings(python="/py", slurm=cluster.detect(STEP)))
    argv = launcher.command(launcher.job(spec("2x1"), tmp_path / "spec.json", tmp_path / "ranks", tmp_path / "logs"))
    assert argv[:5] == ["/py", "-m", "torch.distributed.run", "--rdzv-conf", argv[4]] and argv[4].startswith("timeout=")
    assert "--master-addr gpu07" in " ".join(argv) and "--node-rank 1" in " ".join(argv)


def test_where_the_warm_agent_cannot_start_a_full_cold_torchrun_runs(tmp_path, monkeypatch):
    class Unavailable:
        def run(self, *args, **kwargs):
            raise warm.AgentUnavailable("the warm torchrun agent did not start: no", warm.COLD_HINT)

    started = []

    def fake_run(argv, **kwargs):
        started.append(argv)
        return local.process.Completed(returncode=0, wall_s=0.0, timed_out=False)

    monkeypatch.setenv(ENV_DISABLE, "1")  # no namespace for a job that never starts
    monkeypatch.setattr(local.process, "run", fake_run)
    with pytest.raises(LaunchError, match="every rank exited 0, but"):  # nothing ran, so no rank wrote
        warm.WarmLauncher(Settings(agents=Unavailable())).run(spec(), tmp_path / "case")  # type: ignore[arg-type]
    assert len(started) == 1 and started[0][1:3] == ["-m", "torch.distributed.run"]
