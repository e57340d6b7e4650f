#!/usr/bin/env bash
# slurm-cluster.sh - a throwaway two-node Slurm cluster on this one machine,
# for integration tests.
#
# Usage (as root):
#   scripts/slurm-cluster.sh up DIR     # install (if missing), configure, start
#   scripts/slurm-cluster.sh down DIR   # stop what `up DIR` started (idempotent)
#
# `up` writes everything under DIR (created if absent; its mode becomes 0711
# because munged insists that every directory above its socket is searchable):
#   DIR/slurm.conf        the cluster's config; point SLURM_CONF at it
#   DIR/munge/            key, socket, pid and seed of a private munged
#   DIR/state DIR/spool/  slurmctld state, slurmd spool (n1, n2)
#   DIR/run/  DIR/log/    pid files; one log per daemon (munged, slurmctld,
#                         slurmd-n1, slurmd-n2)
#   DIR/pids              "NAME PID" per daemon started; `down` reads it
#   DIR/uts               "NAME PID UTS-NAMESPACE" per slurmd
# It starts munged, one slurmctld and two slurmd (nodes n1 and n2, each in its
# own UTS namespace so that `hostname` inside a task prints n1 or n2), waits
# until both nodes are idle and prints, as its only line on stdout:
#   export SLURM_CONF=DIR/slurm.conf
# Progress and errors go to stderr.
#
# `down` stops the daemons listed in DIR/pids by pid (SIGTERM, then SIGKILL
# after a bound), never by name, and only after checking that each pid still
# is that daemon (its command line names DIR). Left-over job steps of this
# cluster (processes inside the nodes' UTS namespaces) are stopped the same way.
#
# Exit codes: 0 ok; 1 failure (message on stderr, logs in DIR/log);
#             2 usage; 77 "slurm cluster: skipped: <reason>" (cannot run here).
#
# Tunables (environment):
#   SLURM_CLUSTER_PORT_BASE  first port tried (default 16817); three
#                            consecutive free ports are used: slurmctld, n1, n2
#   SLURM_CLUSTER_CPUS       CPUs declared per node (default max(nproc, 4));
#                            may exceed the real count (oversubscribed)
#   SLURM_CLUSTER_TIMEOUT    seconds to wait for the nodes to be idle (60)

set -euo pipefail

PROG=${0##*/}
NODES=(n1 n2)

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf 'slurm cluster: error: %s\n' "$*" >&2; exit 1; }
skip() { printf 'slurm cluster: skipped: %s\n' "$*" >&2; exit 77; }
usage() {
    printf 'usage: %s up DIR | down DIR\n' "$PROG" >&2
    exit 2
}

# ---------------------------------------------------------------- helpers --

have_binaries() {
    local b
    for b in slurmctld slurmd srun sinfo squeue scancel scontrol munged munge unmunge; do
        command -v "$b" >/dev/null 2>&1 || return 1
    done
}

install_packages() {
    local added_policy=""
    say "installing slurmctld slurmd slurm-client munge with apt-get"
    # Keep the packages' own services (system munge, slurmd, slurmctld with
    # /etc/slurm/slurm.conf) from being started by the postinst scripts.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        added_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends slurmctld slurmd slurm-client munge
    } >&2 || rc=$?
    [[ -n $added_policy ]] && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get install of the Slurm packages failed (rc $rc)"
    have_binaries || die "Slurm binaries still missing after apt-get install"
}

# Is TCP port $1 listened on (IPv4 or IPv6)?
port_busy() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
                      END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_ports() {
    local base=${SLURM_CLUSTER_PORT_BASE:-16817} try p
    for ((try = 0; try < 50; try++)); do
        p=$((base + 3 * try))
        if port_busy "$p" || port_busy $((p + 1)) || port_busy $((p + 2)); then
            continue
        fi
        CTLD_PORT=$p
        NODE_PORTS=($((p + 1)) $((p + 2)))
        return 0
    done
    die "no three free consecutive ports from $base"
}

# Does pid $1 still run a process whose command line mentions DIR?
is_ours() {
    local pid=$1 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmd=$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null) || return 1
    [[ -n $cmd && $cmd == *"$DIR/"* ]]
}

alive() { kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) != Z ]]; }

# SIGTERM the given pids, wait up to $1 seconds, then SIGKILL the rest.
stop_pids() {
    local bound=$1
    shift
    local pid left i
    (($# > 0)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < bound * 10; i++)); do
        left=()
        for pid in "$@"; do alive "$pid" && left+=("$pid"); done
        ((${#left[@]} == 0)) && return 0
        sleep 0.1
    done
    say "SIGKILL to ${left[*]} (still alive after ${bound}s)"
    kill -KILL "${left[@]}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        left=()
        for pid in "$@"; do alive "$pid" && left+=("$pid"); done
        ((${#left[@]} == 0)) && return 0
        sleep 0.1
    done
}

# Processes living in the UTS namespaces "$@" of this cluster's nodes: the
# slurmd, its job steps (slurmstepd) and their tasks. With NS_NEED_ENV set,
# only those whose environment names DIR (SLURM_CONF=DIR/slurm.conf), for
# namespaces whose slurmd is gone and so cannot vouch for them.
namespace_members() {
    local host_uts self_uts ns p pns
    host_uts=$(readlink /proc/1/ns/uts 2>/dev/null || true)
    self_uts=$(readlink /proc/self/ns/uts 2>/dev/null || true)
    for ns in "$@"; do
        [[ -n $ns && $ns != "$host_uts" && $ns != "$self_uts" ]] || continue
        for p in /proc/[0-9]*; do
            p=${p#/proc/}
            pns=$(readlink /proc/"$p"/ns/uts 2>/dev/null) || continue
            [[ $pns == "$ns" ]] && alive "$p" || continue
            if [[ -n ${NS_NEED_ENV:-} ]]; then
                tr '\0' '\n' </proc/"$p"/environ 2>/dev/null |
                    grep -qxF "SLURM_CONF=$DIR/slurm.conf" || continue
            fi
            echo "$p"
        done
    done
    return 0
}

# Start "$@" detached (own session, stdin /dev/null, output to a log) and
# record it in DIR/pids as $name. The pid is the daemon's own pid: setsid,
# unshare (without --fork) and `sh -c 'exec ...'` all exec in place.
start_daemon() {
    local name=$1
    shift
    setsid "$@" </dev/null >"$DIR/log/$name.log" 2>&1 &
    local pid=$!
    echo "$name $pid" >>"$DIR/pids"
    STARTED+=("$name:$pid")
    say "started $name (pid $pid)"
}

show_logs() {
    local f
    for f in "$DIR"/log/*.log; do
        [[ -f $f ]] || continue
        printf -- '--- %s (last 15 lines)\n' "$f" >&2
        tail -n 15 "$f" >&2 || true
    done
}

# -------------------------------------------------------------------- down --

do_down() {
    local pidfile=$DIR/pids
    [[ -f $pidfile ]] || { say "nothing recorded in $pidfile; nothing to stop"; return 0; }
    local name pid rest
    local -a slurmds=() ctld=() munge=() uts=() orphan_uts=()
    # Namespaces recorded by `up`, for nodes whose slurmd already died.
    if [[ -f $DIR/uts ]]; then
        local node ns
        while read -r node pid ns; do
            is_ours "$pid" || orphan_uts+=("$ns")
        done <"$DIR/uts"
    fi
    while read -r name pid rest; do
        [[ -n ${name:-} ]] || continue
        if ! is_ours "$pid"; then
            continue # already gone (or the pid now belongs to someone else)
        fi
        case $name in
            slurmd-*)
                slurmds+=("$pid")
                uts+=("$(readlink /proc/"$pid"/ns/uts 2>/dev/null || true)")
                ;;
            slurmctld) ctld+=("$pid") ;;
            munged) munge+=("$pid") ;;
            *) say "unknown entry '$name $pid' in $pidfile; left alone" ;;
        esac
    done <"$pidfile"

    # Cancel this cluster's jobs while the controller can still do it.
    if ((${#ctld[@]} > 0)) && [[ -f $DIR/slurm.conf ]]; then
        local jobs
        jobs=$(SLURM_CONF=$DIR/slurm.conf timeout 10 squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            say "cancelling jobs: $(echo $jobs)"
            # shellcheck disable=SC2086
            SLURM_CONF=$DIR/slurm.conf timeout 10 scancel $jobs 2>/dev/null || true
            local i
            for ((i = 0; i < 100; i++)); do
                [[ -z $(namespace_members "${uts[@]}" | grep -vxF -f <(printf '%s\n' "${slurmds[@]}") || true) ]] && break
                sleep 0.1
            done
        fi
    fi

    # Node daemons first, then the controller, munged last (the others talk
    # to it while they shut down).
    stop_pids 10 ${slurmds[@]+"${slurmds[@]}"}
    # Whatever is still in the nodes' namespaces (stray slurmstepd or tasks)
    # was started by this cluster.
    if ((${#uts[@]} + ${#orphan_uts[@]} > 0)); then
        local -a strays=()
        mapfile -t strays < <(
            namespace_members ${uts[@]+"${uts[@]}"}
            NS_NEED_ENV=1 namespace_members ${orphan_uts[@]+"${orphan_uts[@]}"}
        )
        if ((${#strays[@]} > 0)); then
            say "stopping left-over job processes: ${strays[*]}"
            stop_pids 5 "${strays[@]}"
        fi
    fi
    stop_pids 10 ${ctld[@]+"${ctld[@]}"}
    stop_pids 10 ${munge[@]+"${munge[@]}"}
    rm -f "$pidfile" "$DIR/uts"
    say "cluster in $DIR is down"
}

# ---------------------------------------------------------------------- up --

STARTED=()
UP_OK=""

on_up_exit() {
    local rc=$?
    if [[ -z $UP_OK && ${#STARTED[@]} -gt 0 ]]; then
        show_logs
        say "bring-up failed; stopping what was started"
        do_down || true
    fi
    exit "$rc"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local secs=$1 what=$2 i
    shift 2
    for ((i = 0; i < secs * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "timed out after ${secs}s waiting for $what"
}

munge_ok() { munge -n -S "$DIR/munge/munge.socket.2" | unmunge -S "$DIR/munge/munge.socket.2"; }

nodes_idle() {
    local out
    out=$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    local n
    for n in "${NODES[@]}"; do
        grep -qxE "$n idle" <<<"$out" || return 1
    done
}

do_up() {
    [[ $(id -u) -eq 0 ]] || skip "not root"
    if ! have_binaries; then
        command -v apt-get >/dev/null 2>&1 || skip "no Slurm binaries and no apt-get"
        install_packages
    fi
    command -v unshare >/dev/null 2>&1 || skip "no unshare"
    command -v setsid >/dev/null 2>&1 || skip "no setsid"
    unshare -u true 2>/dev/null || skip "cannot create UTS namespaces (unshare -u)"

    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    if [[ -f $DIR/pids ]]; then
        local name pid
        while read -r name pid _; do
            is_ours "$pid" && die "a cluster is already running in $DIR ($name pid $pid); run '$PROG down $DIR' first"
        done <"$DIR/pids"
        rm -f "$DIR/pids"
    fi

    # munged insists that every directory above its socket is searchable by
    # all, and a Unix socket path is limited to 107 bytes.
    local parent=$DIR
    while [[ $parent != / ]]; do
        parent=$(dirname "$parent")
        (($(stat -c '0%a' "$parent") & 1)) ||
            die "munged needs $parent to be searchable by all (o+x); use a DIR under /tmp"
    done
    local sock=$DIR/munge/munge.socket.2
    ((${#sock} < 108)) || die "DIR path too long for a Unix socket ($sock)"

    trap on_up_exit EXIT

    # munged wants every directory on the socket's path searchable by all.
    chmod 0711 "$DIR"
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/munge" "$DIR/uts"
    mkdir -p "$DIR/state" "$DIR/run" "$DIR/log" "$DIR/munge"
    local n
    for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n"; done
    chmod 0755 "$DIR/munge"
    : >"$DIR/pids"

    # --- munge
    local key=$DIR/munge/munge.key
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile="$key" >/dev/null
    else
        dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
    fi
    chmod 0400 "$key"
    start_daemon munged munged -F \
        --socket="$DIR/munge/munge.socket.2" --key-file="$key" \
        --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed"
    wait_for 15 "munged to answer on $DIR/munge/munge.socket.2" munge_ok

    # --- slurm.conf
    pick_ports
    local cpus=${SLURM_CLUSTER_CPUS:-$(nproc)}
    ((cpus >= 4)) || [[ -n ${SLURM_CLUSTER_CPUS:-} ]] || cpus=4
    local mem_mb
    mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)
    ((mem_mb > 0)) || mem_mb=1024
    local host
    host=$(hostname -s 2>/dev/null || hostname)
    cat >"$DIR/slurm.conf" <<EOF
# Generated by $PROG for integration tests; see the script's header.
ClusterName=unilabtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket.2
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Nodes declare more CPUs than the machine may have; trust the config.
SlurmdParameters=config_overrides
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
MailProg=/bin/true
KillWait=5
ReturnToService=2
SlurmdTimeout=60
MinJobAge=60
NodeName=${NODES[0]} NodeHostname=${NODES[0]} NodeAddr=127.0.0.1 Port=${NODE_PORTS[0]} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
NodeName=${NODES[1]} NodeHostname=${NODES[1]} NodeAddr=127.0.0.1 Port=${NODE_PORTS[1]} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$DIR/slurm.conf

    # --- daemons
    start_daemon slurmctld slurmctld -D -c -f "$SLURM_CONF"
    wait_for 30 "slurmctld to answer (see $DIR/log/slurmctld.log)" \
        timeout 5 scontrol ping
    for n in "${NODES[@]}"; do
        # shellcheck disable=SC2016
        start_daemon "slurmd-$n" unshare -u sh -c \
            'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' sh "$n" "$SLURM_CONF"
    done

    local secs=${SLURM_CLUSTER_TIMEOUT:-60} i entry
    for ((i = 0; i < secs * 2; i++)); do
        nodes_idle && break
        for entry in "${STARTED[@]}"; do
            alive "${entry#*:}" || die "${entry%%:*} (pid ${entry#*:}) exited"
        done
        sleep 0.5
    done
    if ! nodes_idle; then
        timeout 10 sinfo -N -l >&2 || true
        timeout 10 sinfo -R >&2 || true
        die "nodes ${NODES[*]} not idle after ${secs}s"
    fi
    # Remember the nodes' namespaces: if a slurmd dies, `down` still finds
    # the job steps it left behind.
    : >"$DIR/uts"
    for entry in "${STARTED[@]}"; do
        [[ ${entry%%:*} == slurmd-* ]] || continue
        printf '%s %s %s\n' "${entry%%:*}" "${entry#*:}" \
            "$(readlink /proc/"${entry#*:}"/ns/uts)" >>"$DIR/uts"
    done
    UP_OK=1
    say "cluster up: nodes ${NODES[*]} idle, $cpus CPUs each, slurmctld on port $CTLD_PORT"
    printf 'export SLURM_CONF=%s\n' "$SLURM_CONF"
}

# -------------------------------------------------------------------- main --

(($# == 2)) || usage
CMD=$1
DIR=$2
[[ -n $DIR ]] || usage
[[ $DIR == /* ]] || DIR=$PWD/$DIR
case $CMD in
    up) do_up ;;
    down)
        [[ -d $DIR ]] || { say "$DIR does not exist; nothing to stop"; exit 0; }
        DIR=$(cd "$DIR" && pwd -P)
        do_down
        ;;
    *) usage ;;
esac
