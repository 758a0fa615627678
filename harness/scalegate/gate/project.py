"""The repository a command runs in: its root, its tests, its baselines, and what the gate runs by default.

Every command (``gate``, ``bisect``, ``record-baselines``, ``compare``, ``report``, ``update-baselines``,
``history``) works on the repository it is called from, not on scalegate's checkout: a team gates its own
workloads and training scripts, from its own ``pytest.ini``/``conftest.py``, test files and ``baselines/``.

What the gate runs when the user names nothing (no ``-k``, ``--scaling-models`` or ``--scaling-strategies``):
the repository's ``[tool.scalegate] gate_args`` in its ``pyproject.toml`` if it has them, else its declared
canaries (``canary=True`` in a ``scaling_script`` marker: ``--scaling-canaries``), else all its scaling cases.
In scalegate's own repository, its cnn canaries and the Fabric-vs-DDP parity case. Parity runs only
where the repository has a parity test (``scaling_tests/test_parity.py``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from scalegate.contract.errors import ScalegateError

# scalegate's own canaries: DDP, FSDP and DeepSpeed ZeRO-2 on the cnn workload, 1x2, and their 1x1 reference (an
# explicit "1x1,1x2" would also run ddp-cnn-1x1 and the like, which have no baseline)
OWN_CANARY = [
    "--scaling-models",
    "cnn",
    "--scaling-strategies",
    "single,ddp,fsdp,deepspeed-zero2",
    "--scaling-matrix",
    "default",
]
SELECTING = ("-k", "--scaling-models", "--scaling-strategies")
PARITY_TEST = "scaling_tests/test_parity.py"


@dataclass(frozen=True, kw_only=True)
class Project:
    root: Path
    own: bool = False  # scalegate's own repository
    tests: list[str] = field(default_factory=list)  # test paths for the scaling sessions ([]: its pytest.ini's)
    parity: list[str] = field(default_factory=list)  # its parity test, where it has one
    default: list[str] = field(default_factory=list)  # what the gate selects when the user names nothing

    @classmethod
    def find(cls, cwd: Path | None = None) -> "Project":
        root = toplevel(Path(cwd or Path.cwd()))
        if (root / "harness" / "scalegate" / "__init__.py").is_file() and (
            root / "scaling_tests" / "test_scaling.py"
        ).is_file():
            return cls(
                root=root, own=True, tests=["scaling_tests/test_scaling.py"], parity=[PARITY_TEST], default=OWN_CANARY
            )
        parity = [PARITY_TEST] if (root / PARITY_TEST).is_file() else []
        return cls(root=root, parity=parity, default=_declared_default(root))

    @property
    def baselines(self) -> Path:
        return self.root / "baselines"

    def selection(self, user_args: list[str]) -> list[str]:
        """The default selection, unless the user's arguments select something themselves."""
        named = any(
            a == s or a.startswith(s + "=") or (s == "-k" and a.startswith("-k")) for a in user_args for s in SELECTING
        )
        return [] if named and not self.own else list(self.default)


def toplevel(cwd: Path) -> Path:
    """The git work tree holding ``cwd``, else ``cwd`` itself."""
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else cwd.resolve()


def _declared_default(root: Path) -> list[str]:
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("scalegate", {})
        except tomllib.TOMLDecodeError as exc:
            raise ScalegateError(f"{pyproject} is not valid TOML: {exc}", "fix the file, or remove [tool.scalegate]")
        args = table.get("gate_args")
        if args is not None:
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ScalegateError(
                    f"{pyproject}: [tool.scalegate] gate_args = {args!r} is not a list of strings",
                    'e.g. gate_args = ["-k", "ddp-mylm-1x2 or fsdp-mylm-1x2"]',
                )
            return list(args)
    return ["--scaling-canaries"]


NO_CASES_HINT = (
    "declare your cases in a test file of this repository: a training script with @pytest.mark.scaling_script "
    "(docs/your-script.md) or a workload with @pytest.mark.scaling_matrix (docs/your-model.md)"
)
