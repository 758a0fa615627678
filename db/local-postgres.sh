#!/usr/bin/env bash
# A real local PostgreSQL server for the history's tests and for trying a shared history (docs/history.md).
#
#   db/local-postgres.sh start     # initdb once, start, wait until it answers; prints its URL on stdout
#   export SCALEGATE_HISTORY_DB=$(db/local-postgres.sh url)
#   python -m scalegate history add results/latest
#   db/local-postgres.sh status
#   db/local-postgres.sh stop      # stops the server this script started; says so if a postgres stays behind
#
# Debian's PostgreSQL (`apt-get install -y postgresql`: its initdb, pg_ctl and postgres under
# /usr/lib/postgresql/<version>/bin); as root the server runs as the `postgres` user, as anyone else as that user.
# Idempotent: start on a running server only checks it. It listens on 127.0.0.1 only, port $SCALEGATE_POSTGRES_PORT
# (default 55432, away from a system server's 5432), with trust authentication, fsync off and its data under
# $SCALEGATE_POSTGRES_DIR: a server to test against and throw away, not one to keep a team's history on.
set -euo pipefail

PORT=${SCALEGATE_POSTGRES_PORT:-55432}
if [ "$(id -u)" = 0 ]; then
  DIR=${SCALEGATE_POSTGRES_DIR:-/var/lib/scalegate-postgres}
  OWNER=postgres
else
  DIR=${SCALEGATE_POSTGRES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/scalegate-postgres}
  OWNER=$(id -un)
fi
DATA=$DIR/data
URL="postgresql://postgres@127.0.0.1:$PORT/postgres"

log() { echo "local-postgres: $*" >&2; }

bindir() {
  # Debian's versioned directory holds every server program together (/usr/bin has only wrappers of some)
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$found" ] && command -v pg_ctl >/dev/null 2>&1; then
    found=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
  fi
  for tool in initdb pg_ctl pg_isready; do
    if [ -z "$found" ] || [ ! -x "$found/$tool" ]; then
      log "no PostgreSQL server found (initdb, pg_ctl, pg_isready)"
      log "HINT: apt-get install -y postgresql (Debian's; .ci/run installs it when missing)"
      exit 2
    fi
  done
  echo "$found"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$OWNER" -- "$@"; else "$@"; fi
}

running() { [ -s "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

init() {
  [ -s "$DATA/PG_VERSION" ] && return
  log "initdb in $DATA"
  mkdir -p "$DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { log "no postgres user; HINT: apt-get install -y postgresql"; exit 2; }
    chown "$OWNER" "$DIR"
  fi
  as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 \
    || { log "initdb failed:"; tail -n 20 "$DIR/initdb.log" >&2; exit 1; }
  mkdir -p "$DIR/socket"
  [ "$(id -u)" = 0 ] && chown "$OWNER" "$DIR/socket"
  cat >> "$DATA/postgresql.conf" <<CONF
# Written by db/local-postgres.sh: a server to test against, on this machine only, nothing kept safe.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR/socket'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 50
CONF
}

start() {
  BIN=$(bindir)
  init
  if running; then
    log "already running ($DATA)"
  else
    log "starting postgres on 127.0.0.1:$PORT ($DATA)"
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 start >/dev/null \
      || { log "the server did not start:"; tail -n 20 "$DIR/server.log" >&2; exit 1; }
  fi
  for _ in $(seq 60); do
    if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres; then echo "$URL"; return 0; fi
    sleep 0.5
  done
  log "the server on 127.0.0.1:$PORT does not answer; its log: $DIR/server.log"
  exit 1
}

stop() {
  BIN=$(bindir)
  if [ -s "$DATA/postmaster.pid" ] && running; then
    log "stopping postgres ($DATA)"
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
  fi
  # what a test or a crash may have left: a postgres still serving this data directory
  local left
  left=$(pgrep -f "postgres -D $DATA" || true)
  if [ -n "$left" ]; then
    log "a postgres on $DATA is still running (pid $left): stopping it"
    kill $left 2>/dev/null || true
    sleep 1
    left=$(pgrep -f "postgres -D $DATA" || true)
    [ -z "$left" ] || { log "postgres pid $left did not stop"; exit 1; }
  fi
}

status() {
  BIN=$(bindir)
  if running; then echo "postgres: running, $URL ($DATA)"; else echo "postgres: stopped ($DATA)"; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
