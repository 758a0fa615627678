"""CaseSpec and Topology validate themselves when built, with the factors and a HINT."""

import pytest

from scalegate.contract.errors import SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology


def spec(**changes):
    base = dict(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=32)
    base.update(changes)
    return CaseSpec.of(**base)


@pytest.mark.parametrize("text", ["2x", "0x2", "ax2", "x", "", "2x2x2", "1 x", "-1x2", "1x0"])
def test_malformed_topology_names_input_and_hints(text):
    with pytest.raises(SpecError) as err:
        Topology.parse(text)
    assert "HINT" in str(err.value)
    assert "topology" in str(err.value)


def test_topology_parse_and_world():
    topo = Topology.parse(" 2X4 ")
    assert (topo.nodes, topo.per_node, topo.world_size, str(topo)) == (2, 4, 8, "2x4")


def test_case_id_reads_strategy_model_topology():
    assert spec().case_id == "ddp-cnn-1x2"


def test_spec_is_frozen_and_round_trips(tmp_path):
    original = spec(faults=Faults(delay_ms=5), companion="fabric-ddp")
    with pytest.raises(Exception):
        original.run.steps = 3  # type: ignore[misc]
    assert CaseSpec.read(original.write(tmp_path / "s.json")) == original


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(steps=0), "steps=0"),
        (dict(warmup=-1), "warmup=-1"),
        (dict(dtype="fp8"), "dtype='fp8'"),
        (dict(scaling="strong", global_batch=33), "global batch 33 does not divide by world size 2"),
        (dict(scaling="strong"), "needs a global batch"),
        (dict(micro_batch=0), "micro-batch 0"),
        (dict(companion=None), "companion=None"),
    ],
)
def test_bad_spec_errors_name_the_input(changes, words):
    with pytest.raises(SpecError) as err:
        spec(**changes)
    assert words in str(err.value)
    assert "HINT" in str(err.value)


def test_weak_and_strong_batches():
    assert spec(topology="1x4").global_batch_size == 128
    strong = spec(topology="1x4", scaling="strong", global_batch=64)
    assert (strong.local_batch, strong.global_batch_size) == (16, 64)


def test_strong_scaling_has_ids_and_baselines_of_its_own():
    assert spec(scaling="strong", global_batch=64).case_id == "ddp-cnn-1x2-strong"
    assert spec().case_id == "ddp-cnn-1x2"


def test_both_scalings_run_side_by_side(suite):
    done = suite(
        "--co",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "single,ddp",
        "--scaling-topologies",
        "1x1,1x2",
        "--scaling-scaling",
        "both",
        "--scaling-global-batch",
        "64",
        "-k",
        "single-cnn-1x1 or ddp-cnn-1x2",
    )
    ids = [line.split("[")[1].rstrip("]") for line in done.stdout.splitlines() if "test_scaling[" in line]
    assert ids == ["single-cnn-1x1", "single-cnn-1x1-strong", "ddp-cnn-1x2", "ddp-cnn-1x2-strong"], done.stdout


def test_a_specs_json_is_flat_each_value_under_its_own_key(tmp_path):
    """SPEC.json and every result file's ``spec``: the sections' values under their own keys, the faults under
    ``faults``, so result files of any version read the same (``compare`` reads old runs)."""
    keys = {
        *("strategy", "model", "preset", "topology", "micro_batch", "scaling", "global_batch", "device", "lr"),
        *("grad_check", "microbatches", "companion", "dims", "workload", "import_paths", "zero_grad", "script"),
        *("steps", "warmup", "seed", "dtype", "cpu_threads", "memory_interval_ms"),
        *("timeout_s", "cpu_binding", "compile", "tp_sequence_parallel"),
        *("duet_address", "duet_side", "duet_pairing", "duet_threads"),
        *("local_steps", "profile_steps", "profile_dir", "checkpoint", "checkpoint_dir", "checkpoint_keep", "faults"),
    }
    original = spec(steps=3, duet_side="base", timeout_s=60.0, local_steps=8, faults=Faults(hang_rank=1))
    data = original.to_dict()
    assert set(data) == keys and data["duet_side"] == "base" and data["faults"]["hang_rank"] == 1
    assert (original.run.steps, original.duet.side, original.windows.local_steps) == (3, "base", 8)
    assert CaseSpec.from_dict(data) == original
