#!/usr/bin/env bash
# A real one-machine SLURM (Debian slurmctld + slurmd + munge) to try the SLURM path and for CI.
#
#   slurm/local-cluster.sh start    # install if missing, configure, start; waits until the node is idle
#   srun -N1 .venv/bin/pytest scaling_tests -k "ddp and 1x2"
#   slurm/local-cluster.sh status
#   slurm/local-cluster.sh stop     # stops the daemons this script started
#
# Needs root (packages, munge key, daemons). Idempotent: start on a running cluster only checks it.
# The partition is OverSubscribe=EXCLUSIVE so every job gets the whole node (all its CPUs), as
# GPU clusters usually hand out nodes; config and state live under $SLURM_LOCAL_DIR.
set -euo pipefail
# shellcheck source=slurm/common.sh
. "$(dirname "$0")/common.sh"

DIR=${SLURM_LOCAL_DIR:-/var/lib/scalegate-slurm}
CONF=/etc/slurm/slurm.conf
export SLURM_CONF=$CONF  # this cluster's daemons and sinfo, whatever the caller had
HOST=$(hostname -s)

log() { echo "local-cluster: $*" >&2; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
     && command -v srun >/dev/null; then
    return
  fi
  log "installing slurmctld slurmd munge (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p /etc/slurm "$DIR"/{state,spool,log} /run/munge /var/log/munge /var/lib/munge
  cat > "$CONF.new" <<CONF
# Written by slurm/local-cluster.sh: one machine is controller and its only compute node.
ClusterName=scalegate
SlurmctldHost=$HOST
$(slurm_conf_common "$DIR")
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
CONF
  if ! cmp -s "$CONF.new" "$CONF" 2>/dev/null; then mv "$CONF.new" "$CONF"; else rm -f "$CONF.new"; fi
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  chmod 0400 /etc/munge/munge.key; chmod 0700 /etc/munge
}


start() {
  install_packages
  write_config
  if ! munge -n </dev/null >/dev/null 2>&1; then
    log "starting munged"
    if id munge >/dev/null 2>&1; then runuser -u munge -- munged; else munged --force; fi
  fi
  pid_alive "$DIR/slurmctld.pid" || { log "starting slurmctld"; slurmctld; }
  pid_alive "$DIR/slurmd.pid" || { log "starting slurmd"; slurmd; }
  for _ in $(seq 60); do
    state=$(sinfo -h -N -n "$HOST" -o %t 2>/dev/null || true)
    case "$state" in
      idle*|alloc*|mix*) log "node $HOST is $state"; sinfo; return 0 ;;
      down*|drain*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  log "node $HOST did not become idle within 60s (state: ${state:-none}); logs in $DIR/log"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  return 1
}

stop() {
  for name in slurmd slurmctld; do
    if pid_alive "$DIR/$name.pid"; then
      log "stopping $name"; kill "$(cat "$DIR/$name.pid")"
      for _ in $(seq 50); do pid_alive "$DIR/$name.pid" || break; sleep 0.1; done
    fi
  done
  if [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
    log "stopping munged"; kill "$(cat /run/munge/munged.pid)"
  fi
}

status() {
  pid_alive "$DIR/slurmctld.pid" && echo "slurmctld: running" || echo "slurmctld: stopped"
  pid_alive "$DIR/slurmd.pid" && echo "slurmd: running" || echo "slurmd: stopped"
  if pid_alive "$DIR/slurmctld.pid"; then sinfo; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
