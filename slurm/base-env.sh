#!/usr/bin/env bash
# The base commit's own Python environment, for `gate --base-python` when a PR changes the dependencies.
#
#   python=$(slurm/base-env.sh "$SCALEGATE_BASE")   # empty when the base and HEAD pin the same dependencies
#
# The dependency files (pyproject.toml, setup.sh, requirements*.txt, constraints*.txt) of the base commit and of
# HEAD are hashed; where they differ, the base commit's files are exported to a cache directory keyed by the base's
# hash (SCALEGATE_ENV_CACHE, default ~/.cache/scalegate/envs/<hash>) and its own ./setup.sh builds its .venv
# there, once: later PRs on the same base reuse it. Prints that venv's python. Exit 2 on bad input.
set -euo pipefail
base=${1:?usage: slurm/base-env.sh BASE_COMMIT}
cd "$(dirname "$0")/.."
deps() { git ls-tree -r "$1" -- pyproject.toml setup.sh 'requirements*.txt' 'constraints*.txt' | sha256sum | cut -c1-16; }
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  echo "base-env: $base is not a commit of $(pwd)" >&2
  echo "HINT: fetch it first (git fetch origin main), or pass a hash" >&2
  exit 2
fi
want=$(deps "$base")
if [ "$want" = "$(deps HEAD)" ]; then exit 0; fi  # same dependencies: both sides run in this checkout's .venv
dir="${SCALEGATE_ENV_CACHE:-$HOME/.cache/scalegate/envs}/$want"
if [ ! -f "$dir/.built" ]; then
  echo "base-env: the dependencies differ from $base's: building its environment in $dir (once)" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  git archive "$base" | tar -x -C "$dir"
  (cd "$dir" && ./setup.sh >&2)
  touch "$dir/.built"
fi
echo "$dir/.venv/bin/python"
