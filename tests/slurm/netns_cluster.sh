#!/usr/bin/env bash
# Two hosts for real: a private Slurm cluster on two network namespaces
# joined by a veth pair, for the tests that need a network between nodes.
#   netns_cluster.sh start DIR   (re)start it, all state in DIR
#   netns_cluster.sh stop DIR    cancel every job, stop the daemons, remove
#                                the namespaces (and with them the veth) and DIR
#   netns_cluster.sh exec DIR CMD...  run CMD in host 1's namespace, as a
#                                client of the cluster (SLURM_CONF set)
#   netns_cluster.sh on N DIR CMD...  run CMD in host N's namespace (1 or 2)
# Host N is namespace NS<N>, with veth end VETH<N> at ADDR<N> (10.231.X.N/24)
# and its own host name, node<N> (a UTS namespace of its own for its slurmd
# and the job's processes, so that ember sees two hosts, not one); these are
# in DIR/netns.env (sourceable).  Both ends get netem (delay 2ms, loss 0.1%).
# munged runs in the host's own namespace (its socket is a path, reached from
# both), slurmctld and slurmd node1 in NS1, slurmd node2 in NS2; every node's
# NodeAddr is its own address.  Runs as root.  Exit 77 when Slurm, munge,
# network namespaces, veth or tc are missing, and when netem is, unless
# NETNS_CLUSTER_NETEM=optional (then the link has no delay or loss; start says so).
# Names derive from DIR, so clusters of different DIRs do not collide.
set -uo pipefail
action=${1:-} dir=${2:-}
[ -n "$dir" ] || { echo "usage: netns_cluster.sh start|stop|exec|on ..." >&2; exit 2; }
if [ "$action" = on ]; then
    host_n=$2 dir=${3:-}
    shift 3
elif [ "$action" = exec ]; then
    shift 2
fi
dir=${dir%/}
export SLURM_CONF=$dir/slurm.conf
# shellcheck source=cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"

id=$(printf '%s' "$dir" | md5sum | cut -c1-6)
NS1=ember-$id-1 NS2=ember-$id-2 VETH1=em${id}a VETH2=em${id}b

in_ns() { ip netns exec "$NS1" "$@"; } # a client of the cluster

# 10.231.X.0/24 with X from DIR's name, moved on past any subnet this host uses.
pick_subnet() {
    local x=$((16#${id:0:2} % 250 + 1)) i
    for i in $(seq 250); do
        ip -4 -br addr | grep -qF " 10.231.$x." || { echo "$x"; return; }
        x=$((x % 250 + 1))
    done
    echo "$x"
}

# 77 unless this host can make the namespaces, the veth and the qdisc.
probe_network() {
    local probe=ember-$id-probe netem=ok
    ip netns add "$probe" 2>/dev/null || { echo "SKIP: ip netns add does not work here"; return 77; }
    if ! ip -n "$probe" link add name "${VETH1}p" type veth peer name "${VETH2}p" 2>/dev/null; then
        ip netns del "$probe"
        echo "SKIP: no veth pairs here"
        return 77
    fi
    command -v tc >/dev/null || { ip netns del "$probe"; echo "SKIP: no tc"; return 77; }
    ip netns exec "$probe" tc qdisc add dev "${VETH1}p" root netem delay 2ms loss 0.1% \
        2>/dev/null || netem=missing
    ip netns del "$probe"
    if [ "$netem" = missing ]; then
        if [ "${NETNS_CLUSTER_NETEM:-}" != optional ]; then
            echo "SKIP: tc netem does not work here (kernel without sch_netem);" \
                "NETNS_CLUSTER_NETEM=optional runs without delay and loss"
            return 77
        fi
        echo "netns cluster: no tc netem here: the link has no delay or loss"
    fi
    echo "$netem" >"$dir/netem"
}

network_up() {
    local x n ns veth
    x=$(pick_subnet)
    ADDR1=10.231.$x.1 ADDR2=10.231.$x.2
    ip netns add "$NS1" && ip netns add "$NS2" || return 1
    ip link add name "$VETH1" netns "$NS1" type veth peer name "$VETH2" netns "$NS2" || return 1
    for n in 1 2; do
        ns=NS$n veth=VETH$n addr=ADDR$n
        ip -n "${!ns}" addr add "${!addr}/24" dev "${!veth}" || return 1
        ip -n "${!ns}" link set lo up && ip -n "${!ns}" link set "${!veth}" up || return 1
        if [ "$(cat "$dir/netem")" = ok ]; then
            ip netns exec "${!ns}" tc qdisc add dev "${!veth}" root netem delay 2ms loss 0.1% ||
                return 1
        fi
    done
    cat >"$dir/netns.env" <<EON
NS1=$NS1 NS2=$NS2 VETH1=$VETH1 VETH2=$VETH2 ADDR1=$ADDR1 ADDR2=$ADDR2 NETEM=$(cat "$dir/netem")
EON
}

# Every process left in our namespaces (job steps that outlived the daemons).
kill_ns_leftovers() {
    local ns pids
    for ns in "$NS1" "$NS2"; do
        ip netns list | grep -qw "$ns" || continue
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
    done
}

stop_cluster() {
    ip netns list | grep -qw "$NS1" && cancel_jobs ip netns exec "$NS1"
    stop_pidfile "$dir/run/slurmd-node1.pid" slurmd
    stop_pidfile "$dir/run/slurmd-node2.pid" slurmd
    stop_pidfile "$dir/run/slurmctld.pid" slurmctld
    stop_pidfile "$dir/munge/munged.pid" munged
    kill_ns_leftovers
    ip netns del "$NS1" 2>/dev/null
    ip netns del "$NS2" 2>/dev/null # the veth goes with its namespace
    return 0
}

write_conf() {
    local port=$1
    {
        conf_common "$(hostname -s)" "$ADDR1" "$port"
        echo "NodeName=node1 NodeAddr=$ADDR1 CPUs=8 Port=$((port + 1)) State=UNKNOWN"
        echo "NodeName=node2 NodeAddr=$ADDR2 CPUs=8 Port=$((port + 1)) State=UNKNOWN"
        echo "PartitionName=test Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP"
    } >"$dir/slurm.conf"
}

# The job's processes need the namespace's own /sys (UCX lists the network
# devices in /sys/class/net), which `ip netns exec` mounts, hiding the
# host's cgroup mounts under it; slurmd refuses to start without them.  So
# the daemons mount the host's cgroup filesystems again (DIR/cgroup.mounts).
cgroup_mounts_save() {
    awk '$2 == "/sys/fs/cgroup" || $2 ~ "^/sys/fs/cgroup/"' /proc/self/mounts >"$dir/cgroup.mounts"
}

# in_host N NAME CMD...: CMD in host N's namespace, under host name NAME
# (a UTS namespace of its own), with the cgroup mounts.
in_host() {
    local ns=NS$1 name=$2
    shift 2
    # shellcheck disable=SC2016 # expanded by the inner shell
    ip netns exec "${!ns}" unshare --uts bash -c '
        while read -r dev mnt type opts _; do
            mkdir -p "$mnt" && mount -t "$type" -o "$opts" "$dev" "$mnt" || exit 1
        done <"$1"
        hostname "$2" && shift 2 && exec "$@"' in_host "$dir/cgroup.mounts" "$name" "$@"
}

start_cluster() {
    mkdir -p "$dir"/{state,spool,run,log,tmp,munge} "$dir"/spool/node{1,2} "$dir"/tmp/node{1,2}
    network_up || { echo "setting up the namespaces failed"; return 1; }
    munge_start || return 1
    write_conf "$(free_port_triple)"
    cgroup_mounts_save
    # slurmctld keeps the host's name: SlurmctldHost must match it.
    in_host 1 "$(hostname)" slurmctld -f "$dir/slurm.conf" || return 1
    wait_for 15 in_ns scontrol ping || { echo "slurmctld does not answer"; return 1; }
    in_host 1 node1 slurmd -f "$dir/slurm.conf" -N node1 || return 1
    in_host 2 node2 slurmd -f "$dir/slurm.conf" -N node2 || return 1
    wait_for 20 nodes_idle in_ns || { echo "nodes not idle:"; in_ns sinfo -N; return 1; }
    timeout 20 ip netns exec "$NS1" srun -N2 -n2 true || { echo "srun -N2 -n2 true failed"; return 1; }
    return 0
}

case "$action" in
start)
    if missing=$(daemons_missing); then
        echo "SKIP: $missing not installed (scripts/setup.sh installs slurm-wlm munge)"
        exit 77
    fi
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: the test cluster runs as root"; exit 77; }
    command -v ip >/dev/null && command -v unshare >/dev/null ||
        { echo "SKIP: no ip or unshare"; exit 77; }
    stop_cluster
    rm -rf "$dir"
    mkdir -p "$dir"
    probe_network
    probed=$?
    if [ $probed -ne 0 ]; then
        rm -rf "$dir"
        exit $probed
    fi
    if ! start_cluster; then
        echo "--- logs:"; tail -n 20 "$dir"/log/*.log 2>/dev/null
        stop_cluster
        rm -rf "$dir"
        exit 1
    fi
    echo "netns cluster up in $dir: $(tr '\n' ' ' <"$dir/netns.env");" \
        "$(in_ns sinfo -h -N -o '%N %T' | tr '\n' ' ')"
    ;;
stop)
    stop_cluster
    rm -rf "$dir"
    echo "netns cluster stopped"
    ;;
exec)
    in_ns "$@"
    ;;
on)
    ns=NS$host_n
    case $host_n in 1 | 2) ;; *) echo "netns_cluster.sh on: host 1 or 2, not '$host_n'" >&2; exit 2 ;; esac
    ip netns exec "${!ns}" "$@"
    ;;
*)
    echo "usage: netns_cluster.sh start|stop DIR | exec DIR CMD... | on N DIR CMD..." >&2
    exit 2
    ;;
esac
