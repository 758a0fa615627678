#!/usr/bin/env bash
# Print the NxG topologies that fit this allocation: N = 1, 2, 4, ... up to SLURM_NNODES, G = 1, 2, 4, ...
# up to the devices per node (GPUs if any were allocated, else CPUs). Used by the sbatch scripts.
set -euo pipefail
nodes=${SLURM_NNODES:-1}
per_node=${SLURM_GPUS_ON_NODE:-}
if [ -z "$per_node" ] || [ "$per_node" = 0 ]; then per_node=${SLURM_CPUS_ON_NODE:-$(nproc)}; fi
out=()
for ((n = 1; n <= nodes; n *= 2)); do
  for ((g = 1; g <= per_node; g *= 2)); do out+=("${n}x${g}"); done
done
IFS=,; echo "${out[*]}"
