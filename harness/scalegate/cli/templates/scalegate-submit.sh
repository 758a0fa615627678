#!/usr/bin/env bash
# Written by `python -m scalegate init`: the PR gate from a CI job on a SLURM login node, the one step of the GitHub
# workflow and of the GitLab job. From the PR's checkout (on the filesystem the compute nodes share: the job runs in
# it), it submits ci/scalegate-pr.sbatch with `sbatch --wait`: the checkout is the head, SCALEGATE_BASE the base
# commit, and the gate runs on every node of the allocation.
#
#   SCALEGATE_BASE=$(git merge-base HEAD origin/main) bash ci/scalegate-submit.sh
#
# When the CI job is cancelled (a newer push) or runs out of its time, the SLURM job is cancelled too (scancel, on the
# trap). It leaves the comment's body in scalegate-gate.md: the gate's table, or why there is none (SLURM refused
# the job, the job ran out of its time limit, was cancelled, or ended without a table). Exit: the gate's own code
# (0 no regression, 1 a regression or a failed case, 2 bad input), and 2 wherever the gate gave no verdict.
set -uo pipefail
: "${SCALEGATE_BASE:?set SCALEGATE_BASE to the base commit of the PR}"
export SCALEGATE_BASE
rm -f scalegate-gate.md scalegate-gate.json scalegate-job scalegate-sbatch.err

say() {  # the comment's body when the gate left no table: its title, then why
  printf '### scalegate: PR gate\n\n**NO VERDICT**: %s\n' "$1" > scalegate-gate.md
  echo "scalegate: $1" >&2
}
state() {  # the job's state, and why where SLURM says (PENDING (Priority)): from scontrol while SLURM remembers the
  local line why  # job, else from sacct where accounting keeps it
  line=$(scontrol show job -o "$1" 2>/dev/null)
  if [ -z "$line" ]; then
    sacct -n -X -P -o State -j "$1" 2>/dev/null | head -n 1 | cut -d' ' -f1
    return
  fi
  why=$(grep -o 'Reason=[^ ]*' <<< "$line" | cut -d= -f2)
  [ "$why" = None ] && why=""
  echo "$(grep -o 'JobState=[A-Z_]*' <<< "$line" | cut -d= -f2)${why:+ ($why)}"
}
job_id() { local id; id=$(head -n 1 scalegate-job 2>/dev/null); echo "${id%%;*}"; }

stopped() {  # the CI job is being stopped: take the SLURM job with it
  local job
  job=$(job_id)
  if [ -n "$job" ]; then
    local was
    was=$(state "$job")
    scancel "$job"
    say "the CI job was stopped (cancelled, or out of its time) while SLURM job $job was ${was:-submitted}; the SLURM job was cancelled with it (scancel $job)."
  else
    say "the CI job was stopped before SLURM took the job."
  fi
  exit 2
}
trap stopped INT TERM HUP

sbatch --parsable --wait ci/scalegate-pr.sbatch > scalegate-job 2> scalegate-sbatch.err &
wait $!
code=$?
job=$(job_id)
if [ -z "$job" ]; then
  say "SLURM refused the job: $(grep -v '^$' scalegate-sbatch.err | tail -n 1) (sbatch exited $code). Check the partition, account, GPUs and time asked in ci/scalegate-pr.sbatch."
  exit 2
fi
ended=$(state "$job")
log="scalegate-pr-$job.out"
case "$ended" in
  TIMEOUT*)
    say "SLURM job $job ran out of its time limit before the gate ended ($log). Raise #SBATCH --time in ci/scalegate-pr.sbatch, or lower --max-minutes in SCALEGATE_GATE_ARGS."
    exit 2 ;;
  CANCELLED* | PREEMPTED* | NODE_FAIL* | BOOT_FAIL* | DEADLINE* | OUT_OF_MEMORY*)
    say "SLURM job $job ended $ended before the gate ended; its log: $log."
    exit 2 ;;
esac
if [ ! -s scalegate-gate.md ]; then
  say "SLURM job $job ended ${ended:-} with exit code $code and no table; its log: $log."
  [ "$code" -eq 0 ] && code=2
  exit "$code"
fi
echo "scalegate: SLURM job $job: the gate exited $code; the table in scalegate-gate.md, the job's log in $log"
exit "$code"
