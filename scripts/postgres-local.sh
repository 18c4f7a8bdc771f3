#!/usr/bin/env bash
# A private PostgreSQL server on this machine (Debian's package), for a study's storage and for CI.
#
#   bash scripts/postgres-local.sh start    install what is missing, create the server's data
#                                           folder once, start it (a no-op when it runs)
#   bash scripts/postgres-local.sh stop     stop exactly the server that `start` started
#   bash scripts/postgres-local.sh url      print the storage URL: postgresql://optbench:...@127.0.0.1:PORT/optbench
#   bash scripts/postgres-local.sh status   exit 0 when it runs
#
# Needs root and Debian 12 (apt-get); no systemd: the server runs as the postgres user from its
# own data folder under PG_LOCAL_STATE, listens on 127.0.0.1 only, and asks for a password
# (scram-sha-256). It never touches a cluster that Debian's package set up (pg_lsclusters).
#
# Environment:
#   PG_LOCAL_STATE    folder for the data, the log and the password (default /var/lib/optbench-postgres-local)
#   PG_LOCAL_PORT     TCP port (default 5433, beside a system server's 5432)
#   PG_LOCAL_TIMEOUT  seconds to wait for the server to start or stop (default 60)
set -euo pipefail

STATE=${PG_LOCAL_STATE:-/var/lib/optbench-postgres-local}
PORT=${PG_LOCAL_PORT:-5433}
TIMEOUT=${PG_LOCAL_TIMEOUT:-60}
DATA=$STATE/data

log() { echo "postgres-local: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

bin_dir() { # the newest installed server's binaries
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [[ -n $dir && -x $dir/pg_ctl ]] || return 1
    echo "$dir"
}

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

install_packages() {
    bin_dir >/dev/null && return 0
    log "installing postgresql"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
}

password() { cat "$STATE/password"; }

url() { echo "postgresql://optbench:$(password)@127.0.0.1:$PORT/optbench"; }

running() { [[ -s $DATA/postmaster.pid ]] && as_postgres "$(bin_dir)/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

init_once() {
    [[ -s $DATA/PG_VERSION ]] && return 0
    mkdir -p "$STATE"
    chmod 755 "$STATE"
    (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/password")
    install -d -o postgres -g postgres -m 700 "$DATA"
    local pwfile
    pwfile=$(mktemp)
    password >"$pwfile"
    chown postgres "$pwfile"
    as_postgres "$(bin_dir)/initdb" -D "$DATA" -U optbench --pwfile="$pwfile" \
        --auth=scram-sha-256 -E UTF8 >"$STATE/initdb.log" 2>&1 || {
        rm -f "$pwfile"
        die "initdb failed (see $STATE/initdb.log)"
    }
    rm -f "$pwfile"
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "must run as root"
    install_packages
    init_once
    if running; then
        log "already running: $(url | sed 's/:[^:@]*@/:***@/')"
        return 0
    fi
    touch "$STATE/server.log"
    chown postgres "$STATE/server.log"
    # -k: the socket in the data folder (not /run/postgresql, which a system server may use).
    as_postgres "$(bin_dir)/pg_ctl" -D "$DATA" -l "$STATE/server.log" -w -t "$TIMEOUT" \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -k $DATA" start >/dev/null
    export PGPASSWORD
    PGPASSWORD=$(password)
    if [[ $(as_postgres "$(bin_dir)/psql" -h 127.0.0.1 -p "$PORT" -U optbench -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'optbench'") != 1 ]]; then
        as_postgres "$(bin_dir)/createdb" -h 127.0.0.1 -p "$PORT" -U optbench optbench
    fi
    log "running (pid $(head -1 "$DATA/postmaster.pid")): $(url | sed 's/:[^:@]*@/:***@/')"
}

cmd_stop() {
    if ! running; then
        log "not running"
        return 0
    fi
    log "stopping the server in $DATA (pid $(head -1 "$DATA/postmaster.pid"))"
    as_postgres "$(bin_dir)/pg_ctl" -D "$DATA" -m fast -w -t "$TIMEOUT" stop >/dev/null
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
url)
    running || die "not running; start it with: $0 start"
    url
    ;;
status) running ;;
*)
    echo "usage: $0 start|stop|url|status" >&2
    exit 2
    ;;
esac
