"""The collective ledger: every collective counted on every rank from the dispatcher, judged exactly.

Fast: the algorithms' bytes, the link classes of a 2x2 job's groups, the exact verdict's words on ledgers built
here (a regression named per collective, bytes in other calls left to time, a varying ledger, a side without one),
and a stored baseline's ledger checked when it loads. Slow (real torchrun jobs on gloo, no namespace counter at
all): each collective kind counted with its bytes across 2 ranks; a canary's extra all-reduce regressed in its first
launch; the four code changes of a team's script (tests/assets/ledger_team) named by the judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.contract.faults import Faults
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.spec import CaseSpec
from scalegate.figures import ledger as rows_of
from scalegate.judge import judge, ledger
from scalegate.judge.evidence import CaseRecord, from_results
from scalegate.judge.outcome import Overrides
from scalegate.measure.ledger import sent_bytes
from scalegate.record import baselines
from tests.repos import TEAM, TEAM_CHANGES

ROOT = Path(__file__).resolve().parents[1]


# --- the algorithms' bytes and the link classes ---------------------------------------------------------------------
def test_sent_bytes_follow_each_backends_algorithm():
    mb = 1_000_000
    assert sent_bytes("all_reduce", "nccl", mb, 4, 0, None) == 1.5 * mb  # ring: 2(n-1)/n
    assert sent_bytes("all_gather_into_tensor", "nccl", mb, 4, 0, None) == 0.75 * mb  # (n-1)/n of the output
    assert sent_bytes("reduce_scatter_tensor", "nccl", mb, 4, 0, None) == 0.75 * mb  # (n-1)/n of the input
    assert sent_bytes("reduce_scatter_tensor", "gloo", mb, 4, 0, None) == 1.5 * mb  # gloo: an all-reduce's
    assert sent_bytes("reduce", "gloo", mb, 4, 0, 0) == pytest.approx(15 / 16 * mb)  # ring reduce-scatter + gather
    assert sent_bytes("all_to_all_single", "gloo", mb, 2, 1, None) == 0.5 * mb
    assert sent_bytes("send", "gloo", mb, 2, 0, None) == mb and sent_bytes("recv", "gloo", mb, 2, 1, None) == 0
    assert sent_bytes("gather", "gloo", mb, 2, 0, 0) == 0 and sent_bytes("gather", "gloo", mb, 2, 1, 0) == mb
    assert sent_bytes("all_reduce", "gloo", mb, 1, 0, None) == 0  # a group of one sends nothing
    assert sent_bytes("barrier", "gloo", 0, 8, 0, None) == 0


def entry(op: str, group: str, members: list[int], index: int, calls: int, payload: int, sent: float, steps: int = 3):
    return {
        "op": op,
        "dtype": "float32",
        "group": group,
        "size": len(members),
        "backend": "nccl",
        "index": index,
        "ranks": members,
        "peer": None,
        "calls": [calls] * steps,
        "bytes": [payload] * steps,
        "sent": [sent] * steps,
    }


def launch(topology: str, entries_of, steps: int = 3):
    """A CaseResult whose ranks hold the ledgers ``entries_of(rank)`` makes: the arithmetic of the rows, no job."""
    spec = CaseSpec.of(
        strategy="hsdp", model="cnn", preset="tiny", topology=topology, micro_batch=8, steps=steps, warmup=1
    )
    per_node = spec.topo.per_node
    ranks = [
        RankResult(
            rank=r,
            world_size=spec.world_size,
            node_rank=r // per_node,
            host="h",
            device="cpu",
            step_times_s=[0.1] * steps,
            losses=[1.0] * steps,
            warmup_losses=[1.0],
            loss_weight=1 / spec.world_size,
            ledger={"source": rows_of.SOURCE, "steps": steps, "entries": entries_of(r)},
        )
        for r in range(spec.world_size)
    ]
    return aggregate(spec, ranks)


def test_link_classes_split_each_group_by_where_its_ranks_send():
    # 2x2 HSDP: shard groups {0,1} and {2,3} inside a node, replicate groups {0,2} and {1,3} across nodes,
    # and one all-reduce over all four ranks, whose ring crosses between ranks 1-2 and 3-0
    mb = 1_000_000

    def entries(r: int):
        shard = [0, 1] if r < 2 else [2, 3]
        replicate = [r % 2, r % 2 + 2]
        return [
            entry("all_gather_into_tensor", f"s{shard[0]}", shard, shard.index(r), 2, 4 * mb, 2 * mb),
            entry("all_reduce", f"r{replicate[0]}", replicate, replicate.index(r), 1, mb, mb),
            entry("all_reduce", "0", [0, 1, 2, 3], r, 1, mb, 1.5 * mb),
        ]

    summary = rows_of.summarize(launch("2x2", entries))
    rows = {(row["op"], row["size"], row["span"]): row for row in summary["rows"]}
    gathered = rows[("all_gather_into_tensor", 2, rows_of.WITHIN)]
    assert (gathered["groups"], gathered["calls"], gathered["bytes"]) == (2, 4, 8 * mb)  # each call once per group
    assert (gathered["intra"], gathered["cross"]) == (8 * mb, 0)
    replicated = rows[("all_reduce", 2, rows_of.ACROSS)]
    assert (replicated["groups"], replicated["intra"], replicated["cross"]) == (2, 0, 4 * mb)
    world = rows[("all_reduce", 4, rows_of.ACROSS)]
    assert world["cross"] == world["intra"] == 3 * mb  # two of the ring's four hops cross nodes
    assert summary["steady"] and summary["cross"] == 7 * mb and summary["intra"] == 11 * mb
    assert rows_of.describe(replicated) == "all_reduce in 2 groups of 2 ranks across nodes"


def test_a_step_with_other_collectives_makes_the_ledger_unsteady():
    def entries(r: int):
        varying = entry("all_to_all_single", "0", [0, 1], r, 1, 1000, 500)
        varying["calls"], varying["bytes"], varying["sent"] = [1, 2, 1], [1000, 1800, 1000], [500, 900, 500]
        return [varying]

    summary = rows_of.summarize(launch("1x2", entries))
    assert not summary["steady"]
    assert summary["varies"] == "all_to_all_single in a group of 2 ranks within a node differs in measured step 2 of 3"
    assert summary["rows"][0]["calls_range"] == [1, 2]


# --- the exact verdict -------------------------------------------------------------------------------------------------
def row(op: str, calls: float, payload: float, intra: float = 0.0, cross: float = 0.0, size=2, groups=1, span=None):
    span = span or (rows_of.ACROSS if cross else rows_of.WITHIN)
    return {"op": op, "dtype": "float32", "size": size, "span": span, "groups": groups, "calls": calls,
            "bytes": payload, "intra": intra, "cross": cross}  # fmt: skip


def summary(*rows: dict, steady: bool = True) -> dict:
    return {
        "source": rows_of.SOURCE,
        "rows": list(rows),
        "calls": sum(r["calls"] for r in rows),
        "intra": sum(r["intra"] for r in rows),
        "cross": sum(r["cross"] for r in rows),
        "steady": steady,
        **({} if steady else {"varies": "all_to_all_single in a group of 2 ranks within a node varies"}),
    }


def test_cross_node_bytes_up_regress_at_once_naming_the_collective():
    base = summary(row("all_gather_into_tensor", 24, 5.1e6, cross=2.55e6, groups=4))
    head = summary(row("all_gather_into_tensor", 36, 7.65e6, cross=3.825e6, groups=4))
    found = ledger.judge([head], [base], "the base commit", 0.01, "fsdp-bert_qa-2x2:tiny on cpu")
    assert found.state == ledger.REGRESSED and found.metrics[0].status == "regressed"
    assert found.lines[0] == (
        "collectives: bytes that cross nodes 2.55 -> 3.83 MB a step (+50%) against the base commit, over the 1% "
        "tolerance [fsdp-bert_qa-2x2:tiny on cpu]"
    )
    assert found.lines[1] == (
        "head: all_gather_into_tensor in 4 groups of 2 ranks across nodes: 24 -> 36 calls a step, "
        "5.10 -> 7.65 MB a step (+50%)"
    )


def test_a_new_collective_inside_a_node_regresses_and_is_named_new():
    base = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    head = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6), row("broadcast", 2, 4.9e6, intra=4.9e6))
    found = ledger.judge([head], [base], "the baseline", 0.01, "w")
    assert found.state == ledger.REGRESSED
    assert "bytes within a node 9.80 -> 14.7 MB a step (+50%)" in found.lines[0]
    assert (
        found.lines[1]
        == "head: broadcast in a group of 2 ranks within a node: new, 2 calls a step, 4.90 MB a step (the base issues none)"
    )


def test_the_same_bytes_in_more_calls_are_reported_and_left_to_time():
    base = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    head = summary(row("all_reduce", 5, 4.9e6, intra=9.8e6))
    found = ledger.judge([head], [base], "the base commit", 0.01, "w")
    assert found.state == ledger.CALLS and found.metrics == []
    assert found.note.splitlines() == [
        "collectives: the same bytes as the base commit in other calls; time decides [w]",
        "head: all_reduce in a group of 2 ranks within a node: 1 -> 5 calls a step, 4.90 -> 4.90 MB a step (+0%)",
    ]


def test_rises_inside_the_tolerance_and_identical_ledgers_pass():
    base = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    assert ledger.judge([base], [base], "the base commit", 0.01, "w").state == ledger.SAME
    tiny = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6), row("all_reduce", 1, 4, intra=8, size=2, groups=2))
    assert ledger.judge([tiny], [base], "the base commit", 0.01, "w").state == ledger.CALLS  # named, not failed


def test_a_varying_or_missing_ledger_leaves_the_case_to_time_and_says_why():
    steady = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    varying = summary(row("all_to_all_single", 1.5, 1.4e6, intra=0.7e6), steady=False)
    found = ledger.judge([varying], [varying], "the base commit", 0.01, "w")
    assert found.state == ledger.NOT_JUDGED and found.metrics == []
    assert "collectives: not judged, time alone decides: this commit's collectives vary from step to step" in found.note
    other = summary(row("all_reduce", 2, 9.8e6, intra=19.6e6))
    found = ledger.judge([steady, other], [steady], "the base commit", 0.01, "w")
    assert found.state == ledger.NOT_JUDGED and "launch 2 issued other collectives than its launch 1" in found.note
    found = ledger.judge([steady], [{}], "the base commit", 0.01, "w")
    assert "the base commit recorded no ledger (a scalegate without the ledger ran it)" in found.note


def record_of(*ledgers: dict, **fields) -> CaseRecord:
    from scalegate.judge.evidence import LaunchRecord

    launches = tuple(LaunchRecord(step_times_s=(0.1,) * 8, ledger=led, **fields) for led in ledgers)
    return CaseRecord(case_id="ddp-cnn-1x2", key="ddp-cnn-1x2:tiny", profile="cpu", world_size=2, global_batch=64,
                      steps=8, warmup=1, launches=launches)  # fmt: skip


def test_the_judge_stops_a_case_whose_collectives_regressed_and_keeps_the_reason_in_the_record():
    base = record_of(summary(row("all_reduce", 1, 4.9e6, intra=9.8e6)))
    head = record_of(summary(row("all_reduce", 2, 9.8e6, intra=19.6e6)))
    outcome = judge(head, None, Overrides(), base=base)
    assert outcome.status == "regressed" and outcome.next_launches == 0
    assert outcome.message.startswith("collectives: bytes within a node 9.80 -> 19.6 MB a step (+100%)")
    assert outcome.collectives["state"] == ledger.REGRESSED
    assert outcome.collectives["head"]["intra"] == 19.6e6 and outcome.collectives["base"]["intra"] == 9.8e6
    again = CaseRecord.from_dict(json.loads(json.dumps(head.to_dict())))  # as compare reads it back
    assert judge(again, None, Overrides(), base=base).message == outcome.message


def test_a_stored_baseline_ledger_is_checked_when_it_loads_and_one_without_it_still_loads(tmp_path):
    good = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    baselines.update(tmp_path, "cpu-x", {}, {"ddp-cnn-1x2:tiny": {"ledger": good}, "fsdp-cnn-1x2:tiny": {}})
    loaded = baselines.load(tmp_path, "cpu-x")
    head = record_of(summary(row("all_reduce", 3, 14.7e6, intra=29.4e6)))
    assert judge(head, loaded).message.startswith(
        "collectives: bytes within a node 9.80 -> 29.4 MB a step (+200%) against the baseline"
    )
    path = baselines.path_for(tmp_path, "cpu-x")
    data = json.loads(path.read_text())
    data["cases"]["ddp-cnn-1x2:tiny"]["ledger"] = {"rows": [{"op": "all_reduce"}], "intra": 1, "cross": 0}
    path.write_text(json.dumps(data))
    with pytest.raises(baselines.BaselineError, match=r"case 'ddp-cnn-1x2:tiny' ledger row .* has no str 'dtype'"):
        baselines.load(tmp_path, "cpu-x")


def timed(step_s: float, rounds: int = 3, **fields) -> CaseRecord:
    """Rounds of a case whose same-launch pairs time a distributed step of ``step_s`` against a local step of 0.08 s."""
    jitter = [1 + 0.01 * ((i * 7) % 5 - 2) for i in range(40)]
    pairs = tuple(step_s * j for j in jitter)
    local = tuple(0.08 * j for j in reversed(jitter))
    same = summary(row("all_reduce", 1, 4.9e6, intra=9.8e6))
    return record_of(*[same] * rounds, pair_step_times_s=pairs, local_step_times_s=local, **fields)


def test_a_busy_host_makes_a_timing_verdict_noisy_never_regressed():
    from scalegate import policy

    assert judge(timed(0.12), None, Overrides(), base=timed(0.1)).status == "regressed"  # an idle host's verdict
    busy = timed(0.12, cpu_wait=policy.CONTENDED_WAIT + 0.05)
    outcome = judge(busy, None, Overrides(), base=timed(0.1))
    assert outcome.status == "noisy" and outcome.next_launches == 0  # decided, then named busy: no more rounds
    assert (
        f"timing not judged: other processes held the case's cores (a rank waited for a core {policy.CONTENDED_WAIT + 0.05:.0%} of its measured steps"
        in outcome.message
    )
    assert outcome.collectives["state"] == ledger.SAME  # the ledger is judged all the same


# --- real jobs ---------------------------------------------------------------------------------------------------------
KINDS = """
import json, sys, torch, torch.distributed as dist
from scalegate.measure.ledger import Ledger
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
ledger = Ledger()
ledger.open()
t = torch.ones(1000)
pair = dist.new_group([0, 1])
for step in range(2):
    dist.all_reduce(t)
    dist.all_reduce_coalesced([t, t.clone()])
    dist.all_gather_into_tensor(torch.empty(2000), t)
    dist.all_gather([torch.empty(1000) for _ in range(n)], t)
    dist.reduce_scatter_tensor(torch.empty(500), t)
    dist.broadcast(t, 0)
    dist.reduce(t, 0)
    dist.all_to_all_single(torch.empty(1000), t)
    dist.barrier()
    dist.send(t, 1) if r == 0 else dist.recv(t, 0)
    dist.gather(t, [torch.empty(1000) for _ in range(n)] if r == 0 else None, dst=0)
    dist.scatter(t, [t.clone() for _ in range(n)] if r == 0 else None, src=0)
    dist.all_reduce(t.half(), group=pair)
    ledger.step()
ledger.close()
dist.all_reduce(t)  # after the window: not counted
with open(sys.argv[1] + f"/rank{r}.json", "w") as out:
    json.dump(ledger.result(), out)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_every_collective_kind_is_counted_with_its_bytes_on_gloo(tmp_path):
    script = tmp_path / "kinds.py"
    script.write_text(KINDS)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
        str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)}
    assert found[0]["source"] == "c10d dispatcher" and found[0]["steps"] == 2 and "error" not in found[0]
    by_op = {}
    for e in found[0]["entries"]:
        by_op.setdefault((e["op"], e["dtype"], e["size"]), []).append(e)
    kb = 4000  # 1000 float32 elements
    want = {  # (op, dtype, group size): (calls a step, payload bytes a step, bytes rank 0 sends a step)
        ("all_reduce", "float32", 2): (1, kb, kb),
        ("all_reduce_coalesced", "float32", 2): (1, 2 * kb, 2 * kb),
        ("all_gather_into_tensor", "float32", 2): (1, 2 * kb, kb),
        ("all_gather", "float32", 2): (1, 2 * kb, kb),
        ("reduce_scatter_tensor", "float32", 2): (1, kb, kb),  # gloo reduce-scatters by an all-reduce
        ("broadcast", "float32", 2): (1, kb, kb / 2),
        ("reduce", "float32", 2): (1, kb, kb * 3 / 4),
        ("all_to_all_single", "float32", 2): (1, kb, kb / 2),
        ("barrier", "-", 2): (1, 0, 0),
        ("send", "float32", 2): (1, kb, kb),
        ("gather", "float32", 2): (1, kb, 0),  # rank 0 is the root: it receives
        ("scatter", "float32", 2): (1, kb, kb / 2),
        ("all_reduce", "float16", 2): (1, kb // 2, kb // 2),
    }
    assert set(by_op) == set(want)
    for key, (calls, payload, sent) in want.items():
        [e] = by_op[key]
        assert (e["calls"], e["bytes"], e["sent"]) == ([calls] * 2, [payload] * 2, [sent] * 2), key
        assert e["ranks"] == [0, 1] and e["backend"] == "gloo"
    assert next(e for e in found[0]["entries"] if e["op"] == "send")["peer"] == 1
    receiver = {e["op"]: e for e in found[1]["entries"]}
    assert receiver["recv"]["calls"] == [1, 1] and receiver["recv"]["sent"] == [0, 0]
    assert receiver["gather"]["sent"] == [kb, kb]  # rank 1 sends its piece to the root


def canary(**faults) -> CaseSpec:
    # two warm-up steps: DDP rebuilds its buckets in its second step (a broadcast of their indices, once)
    return CaseSpec.of(strategy="ddp", model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=4, warmup=2,
                    grad_check=False, faults=Faults(**faults))  # fmt: skip


@pytest.mark.slow
def test_a_canarys_extra_all_reduce_regresses_in_its_first_launch_with_no_namespace_counter(
    tmp_path, agents, monkeypatch
):
    from scalegate.launch import run_case

    monkeypatch.setenv("SCALEGATE_NO_NETNS", "1")
    clean = run_case(canary(), tmp_path / "base", agents=agents)
    extra = run_case(canary(extra_allreduce=1), tmp_path / "head", agents=agents)
    assert clean.ranks[0].wire.get("bytes_per_step") is None  # no counter: the ledger alone sees the bytes
    base = from_results([clean], [], key="ddp-cnn-1x2:tiny", profile="cpu")
    head = from_results([extra], [], key="ddp-cnn-1x2:tiny", profile="cpu")
    outcome = judge(head, None, Overrides(), base=base)
    assert outcome.status == "regressed" and outcome.next_launches == 0, outcome.message
    first, named = outcome.message.splitlines()[:2]
    assert first.startswith("collectives: bytes within a node 9.82 -> 19.6 MB a step (+100%) against the base commit")
    assert (
        named
        == "head: all_reduce in a group of 2 ranks within a node: 2 -> 3 calls a step, 4.91 -> 9.82 MB a step (+100%)"
    )


def script_case(project: Path, script: str, strategy: str) -> CaseSpec:
    """The team's script (or a changed copy of it) as its marker would make its 1x2 case: 4 steps after 2."""
    from scalegate.contract.script import ScriptSpec

    argv = (f"--strategy={strategy}", "--max-steps=6")
    spec = ScriptSpec(path=str(project / script), argv=argv, template=argv, cwd=str(project), batch=64, needed_steps=6)
    return CaseSpec.of(strategy=strategy, model="mlp", preset="script", topology="1x2", micro_batch=64, steps=4,
                    warmup=2, grad_check=False, local_steps=0, script=spec)  # fmt: skip


@pytest.fixture(scope="module")
def team_run(tmp_path_factory, agents):
    """The team's script and each of its four changes launched once at 1x2 without a namespace counter: their
    judge records, by case ("ddp-mlp-1x2", "ddp-lostnosync-1x2", ...)."""
    from scalegate.launch import run_case

    project = tmp_path_factory.mktemp("team")
    source = (TEAM / "train.py").read_text()
    launches = {"ddp-mlp-1x2": ("train.py", "ddp"), "fsdp-mlp-1x2": ("train.py", "fsdp")}
    (project / "train.py").write_text(source)
    for name, (_, line, replacement) in TEAM_CHANGES.items():
        assert line in source, name
        (project / f"train_{name}.py").write_text(source.replace(line, replacement))
        strategy = "fsdp" if name == "reshard_flip" else "ddp"
        launches[f"{strategy}-{name.replace('_', '')}-1x2"] = (f"train_{name}.py", strategy)
    os.environ["SCALEGATE_NO_NETNS"] = "1"  # the ledger alone sees the bytes
    try:
        return {
            case: from_results(
                [run_case(script_case(project, script, strategy), project / case, agents=agents)],
                [],
                key=f"{case}:script",
                profile="cpu",
            )  # fmt: skip
            for case, (script, strategy) in launches.items()
        }
    finally:
        del os.environ["SCALEGATE_NO_NETNS"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, base, state, named",
    [
        ("extraallreduce", "ddp-mlp-1x2", ledger.REGRESSED,
         "head: all_reduce in a group of 2 ranks within a node: 1 -> 7 calls a step, 1.34 -> 2.67 MB a step (+100%)"),
        ("lostnosync", "ddp-mlp-1x2", ledger.REGRESSED,
         "head: all_reduce in a group of 2 ranks within a node: 1 -> 4 calls a step, 1.34 -> 5.34 MB a step (+300%)"),
        ("smallbuckets", "ddp-mlp-1x2", ledger.CALLS,
         "head: all_reduce in a group of 2 ranks within a node: 1 -> 2 calls a step, 1.34 -> 1.34 MB a step (+0%)"),
        ("reshardflip", "fsdp-mlp-1x2", ledger.REGRESSED,
         "head: all_gather_into_tensor in a group of 2 ranks within a node: 12 -> 24 calls a step, 5.34 -> 10.7 MB a step (+100%)"),
    ],
)  # fmt: skip
def test_each_of_the_four_changes_is_named_by_the_exact_verdict(team_run, change, base, state, named):
    head = team_run[f"ddp-{change}-1x2" if change != "reshardflip" else f"fsdp-{change}-1x2"]
    outcome = judge(head, None, Overrides(), base=team_run[base])
    assert outcome.collectives["state"] == state, outcome.message
    assert named in outcome.collectives["lines"], outcome.collectives["lines"]
    if state == ledger.REGRESSED:
        assert outcome.status == "regressed" and outcome.next_launches == 0
    else:  # the same bytes in other calls: reported beside the timing verdict, which decides
        assert outcome.status != "regressed" or not any(m.metric == "collectives" for m in outcome.metrics)
        assert "time decides" in outcome.message


# --- whole gates (nightly): the four changes, in a team's script and in the canaries -------------------------------------
EXPECTED = {  # change: (the exact verdict's state, the collective it names, the gate's exit code or None: time decides)
    "extra_all_reduce": (ledger.REGRESSED, "head: all_reduce in a group of 2 ranks", 1),
    "lost_no_sync": (ledger.REGRESSED, "head: all_reduce in a group of 2 ranks", 1),
    "small_buckets": (ledger.CALLS, "head: all_reduce in a group of 2 ranks", None),
    "reshard_flip": (ledger.REGRESSED, "head: all_gather_into_tensor in a group of 2 ranks", 1),
}


def _named_by_the_gate(kind: str, change: str, tmp_path: Path, cluster: str | None = None) -> None:
    from tests.repos import base_trees_left, canary_repo, ledger_gate, outside_slurm_env, team_repo

    repo = (team_repo if kind == "script" else canary_repo)(tmp_path / "repo", change)
    out = tmp_path / "gate"
    command, case = ledger_gate(kind, change, repo, out, cluster)
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=1500, env=outside_slurm_env())
    state, named, code = EXPECTED[change]
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode in ((code,) if code is not None else (0, 1)), said
    found = next(c for c in json.loads(Path(f"{out}.json").read_text())["cases"] if c["case_id"] == case)
    assert found["collectives"]["state"] == state, found["collectives"]
    span = "across nodes" if cluster else "within a node"
    assert any(line.startswith(named) and span in line for line in found["collectives"]["lines"]), found["collectives"]
    if state == ledger.REGRESSED:
        assert found["launches"] == 1 and found["status"] == "regressed"  # decided in the first round, without timing
    table = Path(f"{out}.md").read_text()
    assert "#### Exact: the collectives a step" in table and not base_trees_left(repo)


@pytest.mark.nightly  # eight whole gates, one node: 1-2 minutes each, the bucket change's up to its 5 minutes
@pytest.mark.parametrize("kind", ["script", "canary"])
@pytest.mark.parametrize("change", list(EXPECTED))
def test_the_gate_names_each_change_in_its_first_round_on_one_node_without_a_namespace(tmp_path, kind, change):
    _named_by_the_gate(kind, change, tmp_path)


@pytest.mark.nightly  # eight whole gates across slurm/two-node-cluster.sh's two nodes: 2-6 minutes each
@pytest.mark.parametrize("kind", ["script", "canary"])
@pytest.mark.parametrize("change", list(EXPECTED))
def test_the_gate_names_each_change_across_two_slurm_nodes(two_nodes, tmp_path, kind, change):
    _named_by_the_gate(kind, change, tmp_path, cluster=two_nodes)


def test_the_history_keeps_a_steady_ledgers_cross_node_bytes_and_collectives_a_step():
    from scalegate.history import check, ingest

    steady = summary(row("all_reduce", 2, 4.9e6, cross=9.8e6), row("barrier", 1, 0))
    found = ingest.metrics_of({"status": "ok", "resources": {"ledger": steady}})
    assert found["cross_node_bytes_per_step"] == 9.8e6 and found["collectives_per_step"] == 3
    assert "cross_node_bytes_per_step" in check.LOWER_IS_BETTER and "collectives_per_step" in check.LOWER_IS_BETTER
    varying = summary(row("all_to_all_single", 1.5, 1e6, cross=1e6), steady=False)
    assert "cross_node_bytes_per_step" not in ingest.metrics_of({"status": "ok", "resources": {"ledger": varying}})


def test_update_baselines_ledger_only_adds_each_cases_ledger_and_keeps_the_rest(tmp_path):
    from scalegate.cli.main import main

    baselines.update(
        tmp_path / "b", "cpu-x", {}, {"ddp-cnn-1x2:tiny": {"efficiency": {"value": 0.8, "tolerance": 0.1}}}
    )
    steady = summary(row("all_reduce", 2, 4.9e6, intra=9.8e6))
    run = tmp_path / "run"
    run.mkdir()
    for case_id, found in (("ddp-cnn-1x2", steady), ("fsdp-cnn-1x2", summary(row("x", 1, 1), steady=False))):
        case = {"case_id": case_id, "key": f"{case_id}:tiny", "status": "ok", "profile": "cpu-x", "spec": {},
                "resources": {"ledger": found}}  # fmt: skip
        (run / f"{case_id}.json").write_text(json.dumps(case))
    assert main(["update-baselines", str(run), "--baseline-dir", str(tmp_path / "b"), "--ledger-only"]) == 0
    entry = baselines.load(tmp_path / "b", "cpu-x").cases["ddp-cnn-1x2:tiny"]
    assert entry["efficiency"] == {"value": 0.8, "tolerance": 0.1} and entry["ledger"]["rows"] == steady["rows"]
    assert "fsdp-cnn-1x2:tiny" not in baselines.load(tmp_path / "b", "cpu-x").cases  # a varying ledger: nothing
