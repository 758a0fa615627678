"""CPU binding of ranks (contract/affinity.py, measure/binding.py): the plan, and real ranks on cores of their own."""

import os
import subprocess
import sys

import pytest

from scalegate import workloads
from scalegate.contract import affinity
from scalegate.contract.errors import SpecError
from scalegate.contract.spec import CaseSpec
from scalegate.launch import run_case
from scalegate.measure import binding


def test_each_local_rank_gets_its_own_slice():
    assert affinity.plan([0, 1, 2, 3], 0, 2, 2) == ([0, 1], "")
    assert affinity.plan([0, 1, 2, 3], 1, 2, 2) == ([2, 3], "")
    assert affinity.plan([4, 6], 1, 2, 1) == ([6], "")  # a cpuset's own core numbers, not 0..n


def test_ranks_that_do_not_fit_are_left_unbound_with_the_reason():
    cpus, why = affinity.plan([0, 1], 0, 4, 1)
    assert cpus is None and why == "4 rank(s) x 1 thread(s) need 4 cores, the node has 2"


def test_emulated_nodes_on_one_machine_get_disjoint_slices():
    assert affinity.node_slices([0, 1, 2, 3], 2, 2, 1) == ["0,1", "2,3"]
    assert affinity.node_slices([0, 1], 2, 1, 1) == ["0", "1"]
    assert affinity.node_slices([0, 1], 2, 2, 1) == ["none", "none"]  # 2x2 on two cores: nobody is bound


def test_a_launcher_can_turn_binding_off():
    assert affinity.parse("none") is None and affinity.parse("2,3") == [2, 3]
    done = binding.bind(1, env={affinity.ENV: "none", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert done == {"cpus": None, "why": "SCALEGATE_CPUS='none': the launcher turned binding off"}


def test_a_nodes_only_rank_is_left_to_the_scheduler():
    assert binding.bind(1, env={"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) == {
        "cpus": None,
        "why": "the node's only rank: left to the scheduler",
    }


def test_bind_sets_this_process_affinity():
    first = sorted(os.sched_getaffinity(0))[0]
    code = (
        "import os; from scalegate.measure import binding; "
        f"print(binding.bind(1, env={{'SCALEGATE_CPUS': '{first}', 'LOCAL_RANK': '0', 'LOCAL_WORLD_SIZE': '1'}}), "
        "sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{{'cpus': [{first}], 'why': ''}} [{first}]"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
@pytest.mark.parametrize("binding", [True, False])
def test_real_ranks_record_their_cores(tmp_path, binding, agents):
    preset = workloads.preset("cnn", "tiny")
    spec = CaseSpec.of(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=preset.micro_batch,
        steps=2,
        warmup=1,
        grad_check=False,
        cpu_binding=binding,
    )
    result = run_case(spec, tmp_path / "case", agents=agents)
    cpus = sorted(os.sched_getaffinity(0))
    got = [r.extra["cpu_binding"] for r in result.ranks]
    if binding:
        assert got == [{"cpus": [cpus[0]], "why": ""}, {"cpus": [cpus[1]], "why": ""}]
    else:
        assert got == [{"cpus": None, "why": "off"}] * 2


def test_a_duet_binds_gloos_threads_unless_the_strategys_card_or_the_option_says_why_not():
    assert affinity.gloo_threads("auto", "ddp") == (True, "")
    assert affinity.gloo_threads("auto", "my-own-word") == (True, "")  # not a card: nothing says why not
    assert affinity.gloo_threads("auto", "ddp", script=True) == (False, affinity.SCRIPT_FREE)  # measured: no steadier
    assert affinity.gloo_threads("bound", "ddp", script=True) == (True, "")
    bound, why = affinity.gloo_threads("auto", "zero1-torch")
    assert not bound and why.startswith("zero1-torch: its many small broadcasts") and "183-189 ms" in why
    assert affinity.gloo_threads("bound", "zero1-torch") == (True, "")
    assert not affinity.gloo_threads("auto", "deepspeed-zero3")[0]  # its bound step at W: 1.6-1.8x
    assert affinity.gloo_threads("free", "ddp") == (False, "--scaling-duet-threads free")


def test_a_bad_duet_threads_choice_names_the_option():
    with pytest.raises(SpecError, match=r"duet_threads='sometimes' for ddp-cnn-1x2 is not one of auto, bound, free"):
        CaseSpec.of(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=4, duet_threads="sometimes")


@pytest.mark.parametrize("bound", [True, False])
def test_a_duet_binds_the_threads_the_process_already_has_or_leaves_them_free(bound):
    """A thread started before the binding (as gloo's are, with the process group) is moved onto the rank's core
    only where the duet binds gloo's threads; the rank's own thread is bound either way."""
    first, every = sorted(os.sched_getaffinity(0))[0], sorted(os.sched_getaffinity(0))
    code = (
        "import os, threading; from scalegate.measure import binding\n"
        "go, ids = threading.Event(), []\n"
        "t = threading.Thread(target=lambda: (ids.append(threading.get_native_id()), go.wait())); t.start()\n"
        "while not ids: pass\n"
        f"done = binding.bind(1, env={{'SCALEGATE_CPUS': '{first}', 'LOCAL_RANK': '0', 'LOCAL_WORLD_SIZE': '1'}}, "
        f"duet=True, duet_threads=({bound}, 'why'))\n"
        "print(done['gloo_threads'], sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(ids[0])))\n"
        "go.set(); t.join()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    said, mine, other = out.split(" [")
    assert mine == f"{first}]"
    if bound:
        assert said == "bound (2 threads)" and other == f"{first}]"
    else:
        assert said == "free: why" and other == ", ".join(map(str, every)) + "]"
