#!/usr/bin/env bash
# The GPU acceptance run's setup on a GPU node without a network (the first H100 run's, docs/gpu): a .venv over
# the node's own CUDA torch, the packages it lacks from a wheelhouse, this checkout installed editable. Then:
#     python3 -m benchmarks.gpu_acceptance --no-setup
#
#     bash benchmarks/gpu_offline_setup.sh WHEELHOUSE [PYTHON]     # PYTHON: the one with CUDA torch (default python3)
#
# The wheelhouse is made on a machine with a network, for the node's Python (3.12 on that H100 image):
#     DS_BUILD_OPS=0 pip wheel --no-deps --no-build-isolation deepspeed==0.19.8 -w WHEELHOUSE   # pure Python
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#         --platform manylinux1_x86_64 -d WHEELHOUSE pydantic pydantic_core annotated-types typing-inspection \
#         hjson greenlet py-spy packaging setuptools-scm vcs-versioning   # the last three: pip install -e . (the version from git)
# plus whatever else `python -c "import deepspeed, lightning, transformers, pytest_benchmark, pynvml"` misses there.
# The node's torch is used as it is (the run records its version); ./setup.sh's pinned torch needs a network.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${1:?usage: bash benchmarks/gpu_offline_setup.sh WHEELHOUSE [PYTHON]}
py=${2:-python3}
"$py" -c 'import torch; assert torch.cuda.is_available(), "no CUDA"' || {
  echo "gpu_offline_setup: $py has no CUDA torch" >&2
  echo "HINT: pass the Python that has the node's CUDA torch as the second argument" >&2
  exit 2
}
# A venv over the node's Python sees its packages through a .pth file: --system-site-packages would not, where that
# Python is itself a venv (it was on the H100 image)
"$py" -m venv .venv
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$venv_site/node-packages.pth"
shopt -s nullglob
found=("$wheels"/*.whl)
if [ "${#found[@]}" -gt 0 ]; then
  .venv/bin/pip install -q --no-index --no-deps --no-compile "${found[@]}"
fi
.venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e .
.venv/bin/python -c 'import torch, scalegate, deepspeed, lightning, transformers, pytest_benchmark, pynvml
print(f"gpu_offline_setup: torch {torch.__version__} (cuda {torch.version.cuda}), deepspeed {deepspeed.__version__}")'
