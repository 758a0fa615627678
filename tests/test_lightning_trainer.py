"""The Lightning Trainer front end (harness/scalegate/strategies/lightning_trainer.py) and a user's LightningModule as a
workload (fixtures/lightning_module.py): Lightning's own refusals as skip reasons, bad inputs, and real 1x2
launches: lightning-ddp held to ddp in one parity launch, and a user's module with its gradients checked."""

from __future__ import annotations

import json
import textwrap

import pytest

from scalegate import strategies
from scalegate.checks import agreement, tolerances
from scalegate.contract import cards
from scalegate.contract.errors import SpecError
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.launch import run_case
from scalegate.plan import availability, hostinfo
from scalegate.plan import parity as parity_plan
from scalegate.plan.options import Options, from_argv

FP32 = tolerances.for_dtype("fp32")


def reason(name: str, device: str = "cpu") -> str | None:
    return availability.strategy_unavailable(
        cards.card(name), Topology.parse("1x2"), device, 2 if device == "cuda" else 0
    )


# --- skip reasons: Lightning's own words ------------------------------------------------------------
LIGHTNING_FSDP = (
    "The strategy `fsdp` requires a GPU accelerator, but received `accelerator='cpu'`. Please set "
    "`accelerator='cuda'`, `accelerator='gpu'`, or pass a `CUDAAccelerator()` instance to use FSDP."
)
LIGHTNING_DEEPSPEED = "The DeepSpeed strategy is only supported on CUDA GPUs but `CPUAccelerator` is used."


def test_trainer_fsdp_and_deepspeed_skip_on_cpu_with_lightnings_reason():
    assert reason("lightning-fsdp") == f'lightning-fsdp: Lightning refuses CPU: "{LIGHTNING_FSDP}"'
    assert reason("lightning-deepspeed") == f'lightning-deepspeed: Lightning refuses CPU: "{LIGHTNING_DEEPSPEED}"'
    assert reason("lightning-fsdp", "cuda") is None and reason("lightning-deepspeed", "cuda") is None
    assert reason("lightning-ddp") is None


def test_the_quoted_refusals_are_what_the_trainer_really_says(lightning_refusals):
    # FSDP is refused when the Trainer is built, DeepSpeed when its strategy sets up (the start of fit): in a child
    # process, with Fabric's (tests/conftest.py)
    assert lightning_refusals["trainer"] == [LIGHTNING_FSDP, LIGHTNING_DEEPSPEED], lightning_refusals["said"]


# --- selection: opt-in ------------------------------------------------------------------------------
def options(strategies_: tuple[str, ...]) -> Options:
    argv = ["--scaling-models=cnn", "--scaling-topologies=1x2", "--scaling-preset=tiny", "--scaling-steps=5"]
    return from_argv([*argv, "--scaling-warmup=1", "--scaling-timeout=240", "--scaling-seed=1"]).replace(
        strategies=strategies_
    )


def test_trainer_strategies_run_when_named_and_parity_follows():
    assert not any(n.startswith("lightning-") for n in _all_strategies())
    ids = [case.id for case in parity_plan.build(options(("lightning-ddp",)), hostinfo.detect())]
    assert ids == ["parity-fabric-ddp-vs-ddp-cnn-1x2", "parity-lightning-ddp-vs-ddp-cnn-1x2"]
    assert [c.id for c in parity_plan.build(options(("ddp",)), hostinfo.detect())] == [
        "parity-fabric-ddp-vs-ddp-cnn-1x2"
    ]


def _all_strategies() -> tuple[str, ...]:
    from scalegate.plan.options import _strategies

    return _strategies("all", strategies.names())


# --- bad input --------------------------------------------------------------------------------------
def test_outside_torchrun_the_trainer_strategy_says_how_to_run_it(monkeypatch):
    import torch

    from scalegate.strategies.base import RankContext

    for var in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    ctx = RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, device=torch.device("cpu"))
    strategy = strategies.get("lightning-ddp")(
        ctx, CaseSpec.of(strategy="lightning-ddp", model="cnn", topology="1x1", preset="tiny", micro_batch=8)
    )
    with pytest.raises(SpecError) as err:
        strategy.setup(torch.nn.Linear(2, 2), lambda params: torch.optim.AdamW(params))
    assert "lightning-ddp runs inside the ranks torchrun starts" in str(err.value)
    assert "HINT: run it as a scalegate case" in str(err.value)


USER_MODULE = """
import lightning.pytorch as pl
import torch
from torch import nn

from scalegate import LightningWorkload, Preset


class Lit(pl.LightningModule):
    def __init__(self, features=8, classes=3):
        super().__init__()
        self.layer = nn.Linear(features, classes)
        self.features = features

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": nn.functional.cross_entropy(self(x), y)}

    def train_dataloader(self):
        x = torch.randn(64, self.features)
        y = x[:, :3].argmax(-1)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)


class DictBatches(Lit):
    def train_dataloader(self):
        return [{"x": torch.zeros(2, 8)}]


class LitWorkload(LightningWorkload):
    name = "user_lit"
    module = Lit
    presets = {"tiny": Preset(micro_batch=8, dataset_size=64)}


class NotAModule(LightningWorkload):
    name = "not_a_module"
    module = nn.Linear
    presets = {"tiny": Preset(micro_batch=8)}


class BadData(LitWorkload):
    name = "bad_data"
    module = DictBatches
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_lit.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module("user_lit"), tmp_path


def test_a_bad_lightning_workload_is_refused_with_the_fix(user_module):
    module, _ = user_module
    with pytest.raises(SpecError) as err:
        module.NotAModule("tiny", 1).build_model()
    assert "`module` is <class 'torch.nn.modules.linear.Linear'>, not a LightningModule subclass" in str(err.value)
    assert "HINT: set `module = YourLightningModule`" in str(err.value)
    with pytest.raises(SpecError) as err:
        module.BadData("tiny", 1).dataset()
    assert "train_dataloader() yields dict batches, not (inputs, targets) tensor pairs" in str(err.value)
    inputs, targets = module.LitWorkload("tiny", 1).dataset()  # seeded: the same samples on every rank
    again = module.LitWorkload("tiny", 1).dataset()
    assert inputs.shape == (64, 8) and bool((inputs == again[0]).all()) and bool((targets == again[1]).all())


# --- real launches ----------------------------------------------------------------------------------
def assert_agrees(result, parameters: int) -> None:
    assert agreement.agreement(result) is None, agreement.agreement(result)
    for rank in result.ranks:
        for kind, bound in (("grads", FP32.grad_rel), ("params", FP32.param_rel)):
            report = rank.grad_check[kind]
            assert not report["missing"] and not report["extra"], (kind, report["missing"], report["extra"])
            assert len(report["errors"]) == parameters  # every parameter, under the reference's names
            assert report["errors"][report["worst"]]["rel"] <= bound, (kind, rank.rank, report["worst"])
        assert len(rank.extra["trainer_step_times_s"]) == len(rank.step_times_s)  # the Trainer-side clock


def test_a_users_lightning_module_trains_through_the_trainer_and_agrees_with_one_process(user_module, agents):
    _, project = user_module
    spec = CaseSpec.of(
        strategy="lightning-ddp",
        model="user_lit",
        workload="user_lit:LitWorkload",
        import_paths=(str(project),),
        preset="tiny",
        topology="1x2",
        micro_batch=8,
        steps=2,
        warmup=2,
        timeout_s=240,
    )
    assert_agrees(run_case(spec, project / "case", agents=agents), parameters=2)


@pytest.mark.slow
@pytest.mark.nightly  # nightly: the Trainer beside ddp; its single launch is in the fast tier
def test_lightning_ddp_agrees_converges_and_keeps_parity_with_ddp(suite, tmp_path):
    # 10 measured steps + 1 warm-up: enough for the convergence check (checks.MIN_CONVERGENCE_STEPS). Parity's
    # throughput at 25%: the Trainer's loop costs ~1 ms of Python a step, 11-15% of the tiny cnn's step on the
    # 2-core runners (0.886x at the default 10%), so --scaling-parity-tolerance 0.25 (--scaling-tolerance 0.25 for
    # the case's own efficiency gate); the losses must still match ddp's exactly
    done = suite(
        "-k",
        "lightning-ddp-cnn-1x2 or parity-lightning",
        "--scaling-strategies",
        "lightning-ddp",
        "--scaling-models",
        "cnn",
        "--scaling-steps",
        "10",
        "--scaling-warmup",
        "1",
        "--scaling-local-steps",
        "5",
        "--scaling-tolerance",
        "0.25",
        "--scaling-parity-tolerance",
        "0.25",
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout, done.stdout[-3000:]
    [case] = (tmp_path / "results").glob("2*/lightning-ddp-cnn-1x2.json")
    data = json.loads(case.read_text())
    assert data["problems"] == [] and data["status"] in ("ok", "no-baseline"), data["message"]
    bound = FP32.grad_rel
    for rank in data["result"]["ranks"]:  # gradients of the Trainer's step agree with one process
        grads = rank["grad_check"]["grads"]
        assert not grads["missing"] and grads["errors"][grads["worst"]]["rel"] <= bound
        assert len(rank["losses"]) == 10 and len(rank["extra"]["trainer_step_times_s"]) == 10
    [record] = (tmp_path / "results").glob("2*/parity/parity-lightning-ddp-vs-ddp-cnn-1x2.json")
    parity_data = json.loads(record.read_text())
    assert parity_data["problems"] == [] and parity_data["max_loss_diff"] == 0.0  # the same DDP underneath
    assert (parity_data["candidate"], parity_data["baseline"], parity_data["interleaved"]) == (
        "lightning-ddp",
        "ddp",
        True,
    )


def test_the_example_lightning_module_is_a_workload_with_learnable_data(monkeypatch):
    from pathlib import Path

    from scalegate.workloads.loader import validate

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples" / "lightning_module"))
    from lit_model import LitClassifier, LitWorkload

    workload = validate(LitWorkload, "examples/lightning_module")("tiny", 1)
    assert isinstance(workload.build_model(), LitClassifier)
    inputs, targets = workload.dataset()
    assert inputs.shape == (512, 32) and set(targets.tolist()) == {0, 1, 2, 3}
