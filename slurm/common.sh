# Shared by slurm/local-cluster.sh and slurm/two-node-cluster.sh (sourced, not run).

# The slurm.conf lines both clusters share: root daemons, munge, no cgroups (linuxproc, task/none: they run
# in containers and namespaces without a cgroup hierarchy of their own), whole cores. $1: the state and log
# directory; $2: what names one slurmd's files ("" for one node, "-%n" for several on one machine).
slurm_conf_common() {
  local dir=$1 node=${2:-}
  cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool$node
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$node.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd$node.log
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
CONF
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
