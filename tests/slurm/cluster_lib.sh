# shellcheck shell=bash
# Pieces shared by the test clusters (cluster.sh: two slurmd on 127.0.0.1;
# netns_cluster.sh: two network namespaces joined by a veth pair).  Sourced;
# the caller sets $dir (the cluster's folder) and SLURM_CONF.
PATH=$PATH:/usr/sbin:/sbin

# The first binary a cluster needs that is missing (returns 1 if none).
daemons_missing() {
    local b
    for b in munged mungekey slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || { echo "$b"; return 0; }
    done
    return 1
}

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

# Cancel every job (a daemon stopped under a running step orphans slurmstepd)
# and wait for the queue to empty; clients run through "$@" (e.g. ip netns exec NS).
cancel_jobs() {
    local i
    [ -f "$dir/slurm.conf" ] && [ -s "$dir/run/slurmctld.pid" ] || return 0
    timeout 10 "$@" scancel --quiet --full --user=root 2>/dev/null
    for i in $(seq 100); do
        [ -z "$(timeout 5 "$@" squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
    done
}

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# A port P with P, P+1 and P+2 free here, below the ephemeral range (32768+).
free_port_triple() {
    local port tries
    for tries in $(seq 20); do
        port=$((20000 + RANDOM % 12000))
        port_free "$port" && port_free $((port + 1)) && port_free $((port + 2)) && break
    done
    echo "$port"
}

wait_for() { # SECONDS COMMAND...: poll until COMMAND succeeds
    local tries=$(($1 * 10)) i
    shift
    for i in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}

# munged with a private key and its socket in DIR/munge (reached by path,
# so from every network namespace alike).
munge_start() {
    chmod 755 "$dir" "$dir/munge"
    # munged checks every directory above its socket.
    mungekey -c -f -k "$dir/munge/munge.key" || return 1
    munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" --force || return 1
    wait_for 5 test -S "$dir/munge/munge.sock" || { echo "munged did not start"; return 1; }
}

# slurm.conf's settings but the nodes: conf_common CTLD_HOST CTLD_ADDR PORT
# (slurmctld at PORT, slurmd at PORT+1).
conf_common() {
    local host=$1 addr=$2 port=$3
    cat <<EOC
# Written by tests/slurm/$(basename "$0"): a private cluster in $dir.
ClusterName=embertest
SlurmctldHost=$host($addr)
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
EOC
}

# Both nodes idle, as the clients run through "$@" see them.
nodes_idle() { [ "$("$@" sinfo -h -N -o %T 2>/dev/null | grep -c '^idle')" -eq 2 ]; }
