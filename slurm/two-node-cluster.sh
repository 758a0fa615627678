#!/usr/bin/env bash
# Stretch: a two-node SLURM on one machine. Each node is a network namespace (and UTS namespace,
# so its hostname is its node name) with its own address on a bridge, and its own slurmd; the
# controller runs in node sg0. Links are capped by tc tbf like the harness's emulated nodes.
#
#   slurm/two-node-cluster.sh start                       # needs root; munge from local-cluster.sh (started if down)
#   slurm/two-node-cluster.sh run srun -N2 --ntasks-per-node=1 .venv/bin/pytest scaling_tests -k "ddp and 2x1"
#   slurm/two-node-cluster.sh stop                        # and the one-node cluster, where start brought it up
#
# Everything lives in namespaces scalegate-{hub,n0,n1} and under $DIR; SLURM_CONF points there, so
# it coexists with slurm/local-cluster.sh's one-node cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=slurm/common.sh
. slurm/common.sh
DIR=${SLURM_TWO_NODE_DIR:-/var/lib/scalegate-slurm2}
export SLURM_CONF=$DIR/slurm.conf
RATE=${SCALEGATE_LINK_RATE:-1gbit}
# CPUs each node offers SLURM: one of this machine's cores each; 2 lets a 2x2 case run (oversubscribed: its timing is
# not judged, its collectives and bytes are)
CPUS=${SLURM_TWO_NODE_CPUS:-1}
NODES=(sg0 sg1)
ADDR=(198.18.1.1 198.18.1.2)
HUB=scalegate-hub

log() { echo "two-node-cluster: $*" >&2; }
ns() { echo "scalegate-n$1"; }
# Run a command as node $1: its network namespace, its hostname, SLURM_CONF pointing at our config.
as_node() {
  local i=$1; shift
  # nsenter, not `ip netns exec`: that remounts /sys without the cgroups slurmd needs. A private
  # mount namespace bind-mounts a hosts file so node names resolve; a UTS namespace sets the hostname.
  nsenter --net="/run/netns/$(ns "$i")" unshare --mount --uts sh -c \
    'mount --bind "$1" /etc/hosts; hostname "$0"; shift; exec "$@"' "${NODES[$i]}" "$DIR/hosts" \
    env SLURM_CONF="$SLURM_CONF" "$@"
}

network() {
  ip netns list | grep -qw "$HUB" && return
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  for i in 0 1; do
    local n; n=$(ns "$i")
    ip netns add "$n"
    ip -n "$n" link set lo up
    ip -n "$HUB" link add "p$i" type veth peer name eth0 netns "$n"
    ip -n "$HUB" link set "p$i" master br0 up
    ip -n "$n" addr add "${ADDR[$i]}/24" dev eth0
    ip -n "$n" link set eth0 up
    tc -n "$n" qdisc add dev eth0 root tbf rate "$RATE" burst 1mbit latency 100ms
    tc -n "$HUB" qdisc add dev "p$i" root tbf rate "$RATE" burst 1mbit latency 100ms
  done
}

config() {
  mkdir -p "$DIR"/{state,log,spool-sg0,spool-sg1}
  printf '127.0.0.1 localhost\n%s sg0\n%s sg1\n' "${ADDR[0]}" "${ADDR[1]}" > "$DIR/hosts"
  cat > "$SLURM_CONF" <<CONF
ClusterName=scalegate2
SlurmctldHost=sg0(${ADDR[0]})
$(slurm_conf_common "$DIR" -%n)
NodeName=sg0 NodeAddr=${ADDR[0]} CPUs=$CPUS RealMemory=4000
NodeName=sg1 NodeAddr=${ADDR[1]} CPUs=$CPUS RealMemory=4000
PartitionName=two Nodes=sg[0-1] Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
CONF
}


start() {
  # packages and munged from the one-node cluster; one this start brings up, this script's stop takes down again
  local had_local=0
  case "$(slurm/local-cluster.sh status 2>/dev/null || true)" in *"slurmctld: running"*) had_local=1 ;; esac
  slurm/local-cluster.sh start >/dev/null
  network
  config
  [ "$had_local" = 1 ] || touch "$DIR/local-cluster.ours"
  pid_alive "$DIR/slurmctld.pid" || { log "starting slurmctld in sg0"; as_node 0 slurmctld; }
  for i in 0 1; do
    pid_alive "$DIR/slurmd-${NODES[$i]}.pid" || { log "starting slurmd ${NODES[$i]}"; as_node "$i" slurmd -N "${NODES[$i]}"; }
  done
  for _ in $(seq 60); do
    if [ "$(as_node 0 sinfo -h -N -o %t 2>/dev/null | grep -c idle)" = 2 ]; then as_node 0 sinfo; return 0; fi
    sleep 1
  done
  log "nodes did not become idle; logs under $DIR/log"; as_node 0 sinfo || true; return 1
}

stop() {
  if pid_alive "$DIR/slurmctld.pid"; then  # no job outlives the cluster in its saved state to hold the next one's nodes
    as_node 0 scancel --partition two 2>/dev/null || true
    sleep 1
  fi
  for f in "$DIR"/slurmd-*.pid "$DIR/slurmctld.pid"; do
    pid_alive "$f" && kill "$(cat "$f")" && log "stopped $(basename "$f" .pid)"
  done
  sleep 1
  for n in "$HUB" "$(ns 0)" "$(ns 1)"; do ip netns delete "$n" 2>/dev/null || true; done
  if [ -e "$DIR/local-cluster.ours" ]; then
    slurm/local-cluster.sh stop && rm -f "$DIR/local-cluster.ours"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  run) shift; as_node 0 "$@" ;;
  status) as_node 0 sinfo ;;
  *) echo "usage: $0 start|stop|status|run CMD..." >&2; exit 2 ;;
esac
