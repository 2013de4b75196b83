#!/usr/bin/env bash
# A private Slurm cluster for the tests: munged + slurmctld + two slurmd
# ("nodes" node1 and node2, both 127.0.0.1) on this host, all state in DIR.
#   cluster.sh start DIR     (re)start it; clients then use SLURM_CONF=DIR/slurm.conf
#   cluster.sh stop DIR      cancel every job, stop the daemons (pidfiles), remove DIR
# Runs as root (as the daemons need).  Exit 77 when Slurm or munge is missing.
# Facts behind each setting: tests/slurm/README.md.
set -uo pipefail
action=$1 dir=$2
export SLURM_CONF=$dir/slurm.conf

daemons_missing() {
    local b
    for b in munged mungekey slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || { echo "$b"; return 0; }
    done
    return 1
}
PATH=$PATH:/usr/sbin:/sbin

# A process is alive unless it is gone or a zombie (kill -0 counts zombies).
alive() {
    local state
    [ -r "/proc/$1/stat" ] || return 1
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# SIGTERM the daemon in PIDFILE if it really is COMM started with our DIR.
stop_pidfile() {
    local pidfile=$1 comm=$2 pid i
    [ -s "$pidfile" ] || return 0
    pid=$(tr -dc 0-9 <"$pidfile")
    [ -n "$pid" ] && alive "$pid" || return 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/" || return 0
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 100); do alive "$pid" || return 0; sleep 0.1; done
    echo "cluster: $comm ($pid) ignored SIGTERM; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
}

stop_cluster() {
    local i
    if [ -f "$dir/slurm.conf" ] && [ -s "$dir/run/slurmctld.pid" ]; then
        # Jobs first: a daemon stopped under a running step orphans slurmstepd.
        timeout 10 scancel --quiet --full --user=root 2>/dev/null
        for i in $(seq 100); do
            [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    stop_pidfile "$dir/run/slurmd-node1.pid" slurmd
    stop_pidfile "$dir/run/slurmd-node2.pid" slurmd
    stop_pidfile "$dir/run/slurmctld.pid" slurmctld
    stop_pidfile "$dir/munge/munged.pid" munged
}

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

write_conf() {
    local host=$1 port=$2
    cat >"$dir/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh: a private cluster in $dir.
ClusterName=embertest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=bf_interval=1
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# A failed or cancelled step is gone in 2 s, not the default 30.
KillWait=2
MinJobAge=30
SlurmdParameters=config_overrides
NodeName=node1 NodeAddr=127.0.0.1 CPUs=8 Port=$((port + 1)) State=UNKNOWN
NodeName=node2 NodeAddr=127.0.0.1 CPUs=8 Port=$((port + 2)) State=UNKNOWN
PartitionName=test Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_for() { # SECONDS COMMAND...: poll until COMMAND succeeds
    local tries=$(($1 * 10)) i
    shift
    for i in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
nodes_idle() { [ "$(sinfo -h -N -o %T 2>/dev/null | grep -c '^idle')" -eq 2 ]; }

start_cluster() {
    local host port tries node
    host=$(hostname -s)
    mkdir -p "$dir"/{state,spool,run,log,tmp,munge} "$dir"/spool/node{1,2} "$dir"/tmp/node{1,2}
    chmod 755 "$dir" "$dir/munge"
    # munged checks every directory above its socket.
    mungekey -c -f -k "$dir/munge/munge.key" || return 1
    munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" --force || return 1
    wait_for 5 test -S "$dir/munge/munge.sock" || { echo "munged did not start"; return 1; }
    # A port pair no one listens on (a system Slurm or another build's cluster).
    for tries in $(seq 20); do
        port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
        port_free "$port" && port_free $((port + 1)) && port_free $((port + 2)) && break
    done
    write_conf "$host" "$port"
    slurmctld -f "$dir/slurm.conf" || return 1
    wait_for 15 scontrol ping || { echo "slurmctld does not answer"; return 1; }
    for node in node1 node2; do
        slurmd -f "$dir/slurm.conf" -N "$node" || return 1
    done
    wait_for 20 nodes_idle || { echo "nodes not idle:"; sinfo -N; return 1; }
    timeout 20 srun -N2 -n2 true || { echo "srun -N2 -n2 true failed"; return 1; }
    return 0
}

case "$action" in
start)
    if missing=$(daemons_missing); then
        echo "SKIP: $missing not installed (scripts/setup.sh installs slurm-wlm munge)"
        exit 77
    fi
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: the test cluster runs as root"; exit 77; }
    stop_cluster
    rm -rf "$dir"
    if ! start_cluster; then
        echo "--- logs:"; tail -n 20 "$dir"/log/*.log 2>/dev/null
        stop_cluster
        exit 1
    fi
    echo "cluster up in $dir: $(sinfo -h -N -o '%N %T' | tr '\n' ' ')"
    ;;
stop)
    stop_cluster
    rm -rf "$dir"
    echo "cluster stopped"
    ;;
*)
    echo "usage: cluster.sh start|stop DIR" >&2
    exit 2
    ;;
esac
