#!/usr/bin/env bash
# One command from a fresh clone to a working suite: ./setup.sh
# Creates .venv, installs torch (the CPU wheel torch==2.13.0 where no GPU is visible, the same release's CUDA
# build for the driver where one is; an installed torch is kept), the project with its test extras (psycopg for a
# PostgreSQL history and Apache Otava for its change points among them), and DeepSpeed without building its ops.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
TORCH_CPU_VERSION=2.13.0
DEEPSPEED_VERSION=0.19.8

[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
PIP=("$VPY" -m pip install --disable-pip-version-check -q)
# pip here warns once per package about index locations in the machine's pip config that do not
# exist; keep its real output and drop that noise.
pip_install() {
  "${PIP[@]}" "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }
  return "${PIPESTATUS[0]}"
}

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
torch_version() { "$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true; }

tv=$(torch_version)
if [ -n "$tv" ]; then
  echo "setup: keeping installed torch $tv"
  if has_gpu && [ "${tv#*+cpu}" != "$tv" ]; then
    echo "setup: WARNING: a GPU is visible but torch $tv is a CPU build; for the CUDA build: .venv/bin/pip uninstall -y torch && ./setup.sh" >&2
  fi
elif has_gpu; then
  # the CUDA build of the same pinned torch that this driver runs (harness/scalegate/plan/cuda_wheel.py: a pure function of
  # nvidia-smi's 'CUDA Version'; a driver too old for every build stops here with a HINT)
  mapfile -t torch_args < <("$PY" harness/scalegate/plan/cuda_wheel.py) || true
  if [ "${#torch_args[@]}" -eq 0 ]; then exit 2; fi
  echo "setup: a GPU is visible: installing ${torch_args[*]}"
  pip_install "${torch_args[@]}"
else
  echo "setup: no GPU visible: installing the CPU wheel torch==$TORCH_CPU_VERSION"
  pip_install "torch==$TORCH_CPU_VERSION"
fi
tv=$(torch_version)
# Pin whatever torch is there now, so no later dependency can replace it with another build.
pin=$(mktemp); trap 'rm -f "$pin"' EXIT
echo "torch==${tv%%+*}${tv#${tv%%+*}}" > "$pin"

pip_install -c "$pin" -e ".[test,workloads,report,history,changepoint]"
if ! "$VPY" -c 'import deepspeed' >/dev/null 2>&1; then
  DS_BUILD_OPS=0 pip_install -c "$pin" --no-build-isolation "deepspeed==$DEEPSPEED_VERSION"
fi
# On CPU, DeepSpeed's first job JIT-builds a shared-memory comm op (~65 s on 2 cores, cached under
# ~/.cache/torch_extensions): build it here once rather than inside the first DeepSpeed case.
# The same call DeepSpeed makes; it does nothing where the accelerator has no such op (CUDA).
echo "setup: warming DeepSpeed's CPU comm op (first time ~1 min)"
# into this venv's own cache, where the launchers point the ranks (harness/scalegate/launch/base.py): a second checkout's venv
# does not build it again, nor use another torch's build
export TORCH_EXTENSIONS_DIR="$PWD/.venv/torch_extensions"
"$VPY" -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()' >/dev/null 2>&1 \
  || echo "setup: WARNING: DeepSpeed could not build its CPU comm op; its first job will try again" >&2
"$VPY" - <<'PY'
import torch, deepspeed, lightning, transformers, pytest_benchmark
print(f"setup: torch {torch.__version__} (cuda={torch.cuda.is_available()}), deepspeed {deepspeed.__version__}, "
      f"lightning {lightning.__version__}, transformers {transformers.__version__}")
PY
echo "setup: done. Run the tests with: .venv/bin/pytest"
