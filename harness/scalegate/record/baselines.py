"""Baselines: data with tolerances and provenance, one JSON file per hardware profile.

    baselines/<profile>.json = {"schema_version": 1, "profile": ..., "fingerprint": {...},
                                "cases": {"ddp-cnn-1x2:tiny": {"efficiency": {"value": .., "tolerance": ..},
                                                               "throughput": {...}, ..., "provenance": {...},
                                                               "duet_aa": {"sigma": .., "rounds": .., ...}}}}

``duet_aa`` (optional, ``record-baselines --duet-aa N``): the spread between rounds of an A/A duet's efficiency log
ratio on this profile, the duet gate's sigma floor (judge/duet_floors.py); absent means not recorded.

Written only by an explicit update, atomically (temporary file + rename) under a lock.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from scalegate.contract import SCHEMA_VERSION, atomic
from scalegate.contract.errors import BaselineError

DUET_AA = "duet_aa"
METRICS = ("efficiency", "local_efficiency", "throughput", "mfu", "final_loss", "peak_memory_bytes", "bytes_per_step")


def case_key(case_id: str, preset: str, compiled: bool = False) -> str:
    """``ddp-cnn-1x2:tiny``; a compiled run is another program with a baseline of its own: ``...:tiny+compile``."""
    return f"{case_id}:{preset}{'+compile' if compiled else ''}"


@dataclass(frozen=True, kw_only=True)
class Reference:
    """One baseline value with its tolerance (a fraction, e.g. 0.10 for 10%)."""

    value: float
    tolerance: float


@dataclass(frozen=True, kw_only=True)
class DuetAA:
    """The between-round spread of a duet round's efficiency log ratio in ``rounds`` A/A duet rounds of one case
    (the checkout against itself, both sides resident), and where and when it was recorded."""

    sigma: float
    rounds: int
    date: str
    host: str
    commit: str
    sigma_step_w: float | None = None  # the same rounds' spread of the step time at W's log ratio (older: absent)

    def describe(self) -> str:
        return f"{self.rounds} A/A duet rounds recorded on this profile {self.date[:10]}"


def duet_aa_problem(found: Any) -> str:
    """What is wrong with a case's ``duet_aa`` value, "" when it is usable."""
    if not isinstance(found, dict):
        return f"is {type(found).__name__}, expected an object"
    rounds = found.get("rounds")
    for name in ("sigma", "sigma_step_w"):  # sigma_step_w may be absent (recorded before it existed)
        value = found.get(name)
        if (name == "sigma" or value is not None) and not _is_spread(value):
            return f"{name} {value!r} is not a number in 0..1 (a log ratio's spread)"
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 2:
        return f"rounds {rounds!r} is not a whole number >= 2 (one round has no spread)"
    if not isinstance(found.get("provenance", {}), dict):
        return f"provenance {found['provenance']!r} is not an object"
    return ""


def _is_spread(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 1  # NaN fails too


DUET_AA_FIX = "record it again with `python -m scalegate record-baselines --duet-aa 10 -k CASE`, or delete the field"


@dataclass(frozen=True, kw_only=True)
class BaselineFile:
    path: Path
    profile: str
    fingerprint: dict[str, Any]
    cases: dict[str, dict[str, Any]]

    def reference(self, key: str, metric: str) -> Reference | None:
        entry = self.cases.get(key, {}).get(metric)
        if entry is None:
            return None
        return Reference(value=entry["value"], tolerance=entry["tolerance"])

    def duet_aa(self, key: str) -> DuetAA | None:
        """The case's recorded A/A duet spread; None where none was recorded."""
        found = self.cases.get(key, {}).get(DUET_AA)
        if found is None:
            return None
        problem = duet_aa_problem(found)
        if problem:
            raise BaselineError(f"baseline file {self.path}: case {key!r} {DUET_AA} {problem}", DUET_AA_FIX)
        made = found.get("provenance") or {}
        return DuetAA(
            sigma=float(found["sigma"]),
            rounds=found["rounds"],
            date=str(made.get("date", "(date not recorded)")),
            host=str(made.get("hostname", "?")),
            commit=str(made.get("commit", "?")),
            sigma_step_w=None if found.get("sigma_step_w") is None else float(found["sigma_step_w"]),
        )


def path_for(directory: Path, profile: str) -> Path:
    return Path(directory) / f"{profile}.json"


def load(directory: Path, profile: str) -> BaselineFile | None:
    """The profile's baseline, None if the file does not exist; BaselineError if it is unusable."""
    path = path_for(directory, profile)
    if not path.exists():
        return None
    fix = f"restore it with `git checkout -- {path}` or rewrite it with --scaling-update-baselines"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # RecursionError: absurd nesting
        raise BaselineError(f"baseline file {path} is not valid JSON: {exc}", fix) from None
    if not isinstance(data, dict):
        raise BaselineError(f"baseline file {path}: top level is {type(data).__name__}, expected an object", fix)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise BaselineError(
            f"baseline file {path} has schema_version {data.get('schema_version')!r}, "
            f"this scalegate reads {SCHEMA_VERSION}",
            fix,
        )
    if data.get("profile") != profile:
        raise BaselineError(
            f"baseline file {path} is for profile {data.get('profile')!r}, not {profile!r}",
            f"name the file after its profile, or {fix}",
        )
    cases = data.get("cases")
    if not isinstance(cases, dict):
        raise BaselineError(f"baseline file {path} has no 'cases' object", fix)
    for key, entry in cases.items():
        _validate_entry(path, key, entry, fix)
    return BaselineFile(path=path, profile=profile, fingerprint=data.get("fingerprint", {}), cases=cases)


def _validate_entry(path: Path, key: str, entry: Any, fix: str) -> None:
    from scalegate.record import quarantine  # a leaf module: no cycle

    if not isinstance(entry, dict):
        raise BaselineError(f"baseline file {path}: case {key!r} is not an object", fix)
    if quarantine.KEY in entry and quarantine.problem(entry[quarantine.KEY]):
        raise BaselineError(
            f"baseline file {path}: case {key!r} quarantine {quarantine.problem(entry[quarantine.KEY])}",
            'write it as "quarantine": {"reason": "...", "until": "2026-12-31"}, or remove it',
        )
    if entry.get(DUET_AA) is not None and duet_aa_problem(entry[DUET_AA]):
        raise BaselineError(
            f"baseline file {path}: case {key!r} {DUET_AA} {duet_aa_problem(entry[DUET_AA])}", DUET_AA_FIX
        )
    if "ledger" in entry and ledger_problem(entry["ledger"]):
        raise BaselineError(f"baseline file {path}: case {key!r} ledger {ledger_problem(entry['ledger'])}", fix)
    for metric in METRICS:
        ref = entry.get(metric)
        if ref is None:
            continue
        ok = isinstance(ref, dict) and isinstance(ref.get("tolerance"), (int, float)) and "value" in ref
        if not ok or not 0 <= ref["tolerance"] < 10:
            raise BaselineError(
                f"baseline file {path}: case {key!r} metric {metric!r} needs "
                f"{{'value': ..., 'tolerance': 0..10}}, got {ref!r}",
                fix,
            )
        values = ref["value"] if isinstance(ref["value"], list) else [ref["value"]]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise BaselineError(
                f"baseline file {path}: case {key!r} metric {metric!r} value {ref['value']!r} is not a number", fix
            )
        for extra in (
            "sigma",
            "launches",
            "host_sigma",
        ):  # the local efficiency's spread between launches, and their count
            found = ref.get(extra)
            if found is not None and (isinstance(found, bool) or not isinstance(found, (int, float)) or found < 0):
                raise BaselineError(
                    f"baseline file {path}: case {key!r} metric {metric!r} {extra} {found!r} is not a number >= 0", fix
                )


LEDGER_ROW = {"op": str, "dtype": str, "size": int, "span": str, "groups": int, "calls": float, "bytes": float}


def ledger_problem(found: Any) -> str:
    """What is wrong with a case's stored ledger (figures/ledger.py ``summarize``), "" if nothing."""
    if not isinstance(found, dict) or not isinstance(found.get("rows"), list):
        return "is not an object with a list of rows"
    for name in ("intra", "cross"):
        if not _is_number(found.get(name)):
            return f"has no number {name!r} (bytes a step)"
    for row in found["rows"]:
        for name, kind in LEDGER_ROW.items():
            value = row.get(name) if isinstance(row, dict) else None
            if not (_is_number(value) if kind in (int, float) else isinstance(value, kind)):
                return f"row {row!r} has no {kind.__name__} {name!r}"
    return ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update(
    directory: Path, profile: str, fingerprint: dict[str, Any], entries: dict[str, dict[str, Any]]
) -> tuple[Path, list[str]]:
    """Merge ``entries`` into the profile's file atomically; return the path and a readable diff."""
    path = path_for(directory, profile)
    with _locked(path):
        old = load(directory, profile)
        cases = dict(old.cases) if old else {}
        diff = [_diff_line(key, cases.get(key), entry) for key, entry in sorted(entries.items())]
        for key, entry in entries.items():
            cases[key] = _keep_team_fields(cases.get(key) or {}, entry)
        _write(path, profile, fingerprint, cases)
    return path, diff


def set_field(directory: Path, profile: str, fingerprint: dict[str, Any], field: str, values: dict[str, Any]) -> Path:
    """One field of some cases' entries (``duet_aa``) written atomically, the rest of each entry and of the file as
    it was; a case without an entry gets one holding that field only (a later full update keeps it)."""
    path = path_for(directory, profile)
    with _locked(path):
        old = load(directory, profile)
        cases = dict(old.cases) if old else {}
        for key, value in values.items():
            cases[key] = {**cases.get(key, {}), field: value}
        _write(path, profile, old.fingerprint if old and old.fingerprint else fingerprint, cases)
    return path


def _write(path: Path, profile: str, fingerprint: dict[str, Any], cases: dict[str, Any]) -> None:
    """The profile's whole file, atomically (the caller holds its lock)."""
    atomic.write_json(
        path,
        {
            "schema_version": SCHEMA_VERSION,
            "profile": profile,
            "fingerprint": fingerprint,
            "cases": dict(sorted(cases.items())),
        },
    )


def _keep_team_fields(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What a team wrote by hand or recorded apart outlives a re-recorded baseline: a quarantine, a measured spread
    between hosts, the A/A duet spread (``record-baselines --duet-aa``)."""
    merged = dict(new)
    for kept in ("quarantine", DUET_AA):
        if kept in old and kept not in new:
            merged[kept] = old[kept]
    spread = (old.get("local_efficiency") or {}).get("host_sigma")
    if (
        spread is not None
        and isinstance(new.get("local_efficiency"), dict)
        and "host_sigma" not in new["local_efficiency"]
    ):
        merged["local_efficiency"] = {**new["local_efficiency"], "host_sigma": spread}
    return merged


def _diff_line(key: str, old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    parts = []
    for metric in ("efficiency", "local_efficiency", "throughput"):
        after = new.get(metric, {}).get("value")
        before = (old or {}).get(metric, {}).get("value")
        if after is None:
            continue
        parts.append(f"{metric} {after:.4g}" if before is None else f"{metric} {before:.4g} -> {after:.4g}")
    return f"{'~' if old else '+'} {key}: " + ", ".join(parts)


def provenance(commit: str, hostname: str, machine: dict[str, Any], host_id: str = "") -> dict[str, Any]:
    """``host_id``: the machine and boot that measured it (``HostInfo.host_id``); the stored gate judges a run on
    any other host with the spread between hosts added (harness/scalegate/judge/timing.py)."""
    return {
        "commit": commit,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": hostname,
        **({"host_id": host_id} if host_id else {}),
        "machine": machine,
        "schema_version": SCHEMA_VERSION,
    }
