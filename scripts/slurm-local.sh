#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for trying optbench's SLURM path and for CI.
#
#   bash scripts/slurm-local.sh start    install what is missing, write configs, start the daemons
#                                        that are not running, wait until the node takes jobs
#                                        (a no-op when everything already runs)
#   bash scripts/slurm-local.sh stop     stop exactly the daemons that `start` started
#   bash scripts/slurm-local.sh stop slurmdbd    stop (or start) one daemon only, by its recorded
#   bash scripts/slurm-local.sh start slurmdbd   pid: e.g. an accounting outage for a test
#   bash scripts/slurm-local.sh status   print the daemons and sinfo; exit 0 when all are running
#
# Needs root and Debian 12 (apt-get); works without systemd. Daemons, in start order: munged,
# mariadbd, slurmdbd, slurmctld, slurmd. Accounting (slurmdbd + MariaDB) is what lets `sacct`, and
# so submitit, see a killed job as FAILED instead of UNKNOWN forever.
#
# Environment:
#   SLURM_LOCAL_STATE           folder for pid files, logs and the database password
#                               (default /var/lib/optbench-slurm-local)
#   SLURM_LOCAL_MAX_ARRAY_SIZE  slurm.conf MaxArraySize (default: the value in the slurm.conf
#                               this script wrote, else 1001, SLURM's own default); set it low
#                               (e.g. 4) to exercise job-array splitting
#   SLURM_LOCAL_GPUS            number of fake GPU devices /dev/fakegpuN (default: as in the
#                               slurm.conf this script wrote, else 2)
#   SLURM_LOCAL_TIMEOUT         seconds to wait for each daemon and for the idle node (default 60)
#
# Configs go to /etc/slurm (where the SLURM commands look). A slurm.conf that this script did not
# write is never overwritten.
set -euo pipefail

STATE=${SLURM_LOCAL_STATE:-/var/lib/optbench-slurm-local}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
CONF_DIR=/etc/slurm
MARK="# written by optbench scripts/slurm-local.sh"
# A restart keeps what the last start was told (a slurm.conf this script wrote), unless told again.
our_conf_value() { # our_conf_value SED_EXPRESSION: a value from our own slurm.conf, or nothing
    if grep -qsF "$MARK" "$CONF_DIR/slurm.conf"; then sed -n "$1" "$CONF_DIR/slurm.conf" | head -1; fi
}
MAX_ARRAY_SIZE=${SLURM_LOCAL_MAX_ARRAY_SIZE:-$(our_conf_value 's/^MaxArraySize=\([0-9]*\)$/\1/p')}
MAX_ARRAY_SIZE=${MAX_ARRAY_SIZE:-1001}
if [[ -z ${SLURM_LOCAL_GPUS:-} ]] && grep -qsF "$MARK" "$CONF_DIR/slurm.conf"; then
    NGPUS=$(our_conf_value 's/^NodeName=.* Gres=gpu:\([0-9]*\).*$/\1/p')
    NGPUS=${NGPUS:-0}
else
    NGPUS=${SLURM_LOCAL_GPUS:-2}
fi
PACKAGES=(slurm-wlm slurm-client munge slurmdbd mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd) # start order; stop goes in reverse

log() { echo "slurm-local: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- pids -------------------------------------------------------------------------------------

pid_of() { cat "$STATE/pids/$1.pid" 2>/dev/null || true; }

# True when the recorded pid is alive and still runs the daemon we started (guards pid reuse).
is_running() {
    local pid
    pid=$(pid_of "$1")
    [[ -n $pid && -r /proc/$pid/comm && "$(cat "/proc/$pid/comm")" == "$1" ]]
}

wait_for() { # wait_for WHAT COMMAND...: poll until COMMAND succeeds or TIMEOUT passes
    local what=$1
    shift
    for _ in $(seq $((TIMEOUT * 2))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "timed out after ${TIMEOUT}s waiting for $what (logs: $STATE/logs, /var/log/slurm)"
}

# Start a foreground daemon in its own session and record the pid that runs it.
launch() { # launch NAME COMMAND...
    local name=$1
    shift
    # The inner shell writes its own pid, then execs the daemon: the recorded pid is the daemon's.
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$STATE/pids/$name.pid" "$@" \
        </dev/null >>"$STATE/logs/$name.log" 2>&1 &
    wait_for "$name to record its pid" test -s "$STATE/pids/$name.pid"
}

# --- install and configure ----------------------------------------------------------------------

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

db_password() {
    if [[ ! -s $STATE/dbpass ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/dbpass")
    fi
    cat "$STATE/dbpass"
}

write_file() { # write_file PATH OWNER MODE < content
    local tmp
    tmp=$(mktemp "$1.XXXXXX")
    cat >"$tmp"
    chown "$2" "$tmp"
    chmod "$3" "$tmp"
    mv "$tmp" "$1"
}

write_configs() {
    local host cpus mem_mb first_job
    host=$(hostname -s)
    # Kept across restarts (start_slurmctld sets it when the controller starts without state).
    first_job=$(grep -m1 '^FirstJobId=' "$CONF_DIR/slurm.conf" 2>/dev/null || echo FirstJobId=1)
    # GNU nproc honours OpenMP's thread caps (a test run sets OMP_NUM_THREADS=1): the node's
    # CPUs are all of this machine's
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    # 90% of physical memory: slurmd drains a node whose RealMemory exceeds what it finds.
    mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    mkdir -p "$CONF_DIR"
    if [[ -e $CONF_DIR/slurm.conf ]] && ! grep -qF "$MARK" "$CONF_DIR/slurm.conf"; then
        die "$CONF_DIR/slurm.conf exists and was not written by this script; not touching it"
    fi
    for ((i = 0; i < NGPUS; i++)); do
        # Character devices (a copy of /dev/null): slurmd refuses plain files as GPU devices.
        [[ -c /dev/fakegpu$i ]] || mknod "/dev/fakegpu$i" c 1 3
    done
    local gres_node="" gres_types=""
    if ((NGPUS > 0)); then
        gres_node=" Gres=gpu:$NGPUS"
        gres_types="GresTypes=gpu"
        write_file "$CONF_DIR/gres.conf" root:root 644 <<EOF
$MARK
NodeName=$host Name=gpu File=/dev/fakegpu[0-$((NGPUS - 1))]
EOF
    else
        rm -f "$CONF_DIR/gres.conf"
    fi
    write_file "$CONF_DIR/slurm.conf" root:root 644 <<EOF
$MARK
ClusterName=$host
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
# How long a requeued job waits before it may start again (default 120 s).
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# No cgroup plugins: they need a writable cgroup tree, which containers often lack.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MaxArraySize=$MAX_ARRAY_SIZE
$first_job
KillWait=5
# Look at pending jobs often (a tiny cluster): a requeued job starts soon after cred_expire.
SchedulerParameters=sched_interval=5,bf_interval=2
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
$gres_types
NodeName=$host CPUs=$cpus RealMemory=$mem_mb$gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    write_file "$CONF_DIR/slurmdbd.conf" slurm:slurm 600 <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$(db_password)
StorageLoc=slurm_acct_db
EOF
}

make_folders() {
    mkdir -p "$STATE/pids" "$STATE/logs"
    chmod 700 "$STATE"
    install -d -o slurm -g slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o mysql -g mysql /run/mysqld
    [[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (the munge package makes it)"
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql >>"$STATE/logs/mariadbd.log" 2>&1
}

# --- daemons ------------------------------------------------------------------------------------

start_munged() {
    # munged runs as the munge user (it checks the key's owner); setpriv execs, keeping the pid.
    launch munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground
    wait_for "munged" munge -n
}

start_mariadbd() {
    launch mariadbd mariadbd --user=mysql
    wait_for "mariadbd" mariadb-admin ping
    local pass
    pass=$(db_password)
    mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
}

start_slurmdbd() {
    launch slurmdbd slurmdbd -D
    wait_for "slurmdbd" sacctmgr -n list cluster
}

next_job_id() { # one above every job id that accounting knows (slurmdbd must run)
    local max
    max=$(sacct -a -X -n -P -o JobIDRaw -S 2000-01-01 -E now 2>/dev/null | cut -d_ -f1 | sort -n | tail -1)
    echo $((${max:-0} + 1))
}

start_slurmctld() {
    if [[ ! -e /var/spool/slurmctld/job_state ]]; then
        # A controller without saved state numbers jobs from FirstJobId (default 1), but
        # accounting may hold jobs of an earlier cluster here: sacct would then answer for a
        # new job with an old job's state (CANCELLED, say). Number new jobs after those.
        sed -i "s/^FirstJobId=.*/FirstJobId=$(next_job_id)/" "$CONF_DIR/slurm.conf"
    fi
    launch slurmctld slurmctld -D
    wait_for "slurmctld" scontrol ping
}

start_slurmd() {
    launch slurmd slurmd -D
}

# The node takes jobs: idle, or already running some (a restart with jobs queued or running).
node_ready() { [[ "$(sinfo -h -o %t 2>/dev/null)" =~ ^(idle|mix|alloc|comp)[*~#%]*$ ]]; }

all_running() {
    for d in "${DAEMONS[@]}"; do
        is_running "$d" || return 1
    done
}

known_daemon() {
    [[ " ${DAEMONS[*]} " == *" $1 "* ]] || die "unknown daemon $1 (one of: ${DAEMONS[*]})"
}

cmd_start_one() { # start one daemon that an earlier full `start` configured
    known_daemon "$1"
    [[ $(id -u) == 0 ]] || die "must run as root"
    [[ -d $STATE/pids ]] || die "no cluster was started here; run '$0 start' first"
    if is_running "$1"; then
        log "$1 is already running (pid $(pid_of "$1"))"
        return 0
    fi
    log "starting $1"
    "start_$1"
    log "$1 is running (pid $(pid_of "$1"))"
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "must run as root"
    if all_running; then
        log "already running: $(sinfo -h -o '%P %D %t %c CPUs %G' 2>/dev/null || echo 'sinfo failed')"
        return 0
    fi
    install_packages
    mkdir -p "$STATE"
    make_folders
    write_configs
    for d in "${DAEMONS[@]}"; do
        if is_running "$d"; then
            continue
        fi
        if [[ $d == munged ]] && munge -n >/dev/null 2>&1; then
            log "a munged that this script did not start is running; using it"
            continue
        fi
        log "starting $d"
        "start_$d"
    done
    wait_for "the node to take jobs (sinfo -h -o %t)" node_ready
    log "cluster $(hostname -s) is up: $(sinfo -h -o '%P %D %t %c CPUs %G')"
}

cmd_stop() { # cmd_stop [DAEMON]: all daemons in reverse start order, or just DAEMON
    local i d pid
    [[ -z ${1:-} ]] || known_daemon "$1"
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        d=${DAEMONS[i]}
        [[ -z ${1:-} || $1 == "$d" ]] || continue
        if ! is_running "$d"; then
            rm -f "$STATE/pids/$d.pid"
            continue
        fi
        pid=$(pid_of "$d")
        log "stopping $d (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq $((TIMEOUT * 2))); do
            is_running "$d" || break
            sleep 0.5
        done
        if is_running "$d"; then
            log "$d did not stop in ${TIMEOUT}s; killing pid $pid"
            kill -KILL "$pid"
        fi
        rm -f "$STATE/pids/$d.pid"
    done
}

cmd_status() {
    local all=0
    for d in "${DAEMONS[@]}"; do
        if is_running "$d"; then
            echo "$d: running (pid $(pid_of "$d"))"
        else
            echo "$d: not running"
            all=1
        fi
    done
    if command -v sinfo >/dev/null && sinfo >/dev/null 2>&1; then
        sinfo
    fi
    return $all
}

case ${1:-} in
start) if [[ -n ${2:-} ]]; then cmd_start_one "$2"; else cmd_start; fi ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status ;;
*)
    echo "usage: $0 start [DAEMON]|stop [DAEMON]|status   (DAEMON: ${DAEMONS[*]})" >&2
    exit 2
    ;;
esac
