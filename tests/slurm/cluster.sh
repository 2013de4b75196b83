#!/usr/bin/env bash
# A private Slurm cluster for the tests: munged + slurmctld + two slurmd
# ("nodes" node1 and node2, both 127.0.0.1) on this host, all state in DIR.
#   cluster.sh start DIR     (re)start it; clients then use SLURM_CONF=DIR/slurm.conf
#   cluster.sh stop DIR      cancel every job, stop the daemons (pidfiles), remove DIR
# Runs as root (as the daemons need).  Exit 77 when Slurm or munge is missing.
# Facts behind each setting: tests/slurm/README.md.  netns_cluster.sh is the
# same cluster on two network namespaces (two hosts for real).
set -uo pipefail
action=$1 dir=$2
export SLURM_CONF=$dir/slurm.conf
# shellcheck source=cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"

stop_cluster() {
    cancel_jobs
    stop_pidfile "$dir/run/slurmd-node1.pid" slurmd
    stop_pidfile "$dir/run/slurmd-node2.pid" slurmd
    stop_pidfile "$dir/run/slurmctld.pid" slurmctld
    stop_pidfile "$dir/munge/munged.pid" munged
}

write_conf() {
    local host=$1 port=$2
    {
        conf_common "$host" 127.0.0.1 "$port"
        echo "NodeName=node1 NodeAddr=127.0.0.1 CPUs=8 Port=$((port + 1)) State=UNKNOWN"
        echo "NodeName=node2 NodeAddr=127.0.0.1 CPUs=8 Port=$((port + 2)) State=UNKNOWN"
        echo "PartitionName=test Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP"
    } >"$dir/slurm.conf"
}

start_cluster() {
    local host port node
    host=$(hostname -s)
    mkdir -p "$dir"/{state,spool,run,log,tmp,munge} "$dir"/spool/node{1,2} "$dir"/tmp/node{1,2}
    munge_start || return 1
    # A port triple no one listens on (a system Slurm or another build's cluster).
    port=$(free_port_triple)
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
