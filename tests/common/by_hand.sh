# tests/common/by_hand.sh: four ember-train ranks started by hand, without a
# launcher (trainers 0-1, master 2, ps0 3), so nothing but ember itself
# notices when one is lost.  Sourced by the test scripts.
#
#   by_hand_start TRAIN WORK [NAME=VALUE...] -- [ARGS...]
#       start them on a fresh job secret and store port (BY_HAND_PORT if
#       set), each with the
#       environment given and ARGS, logging to WORK/rank<r>.log; their pids
#       in BY_HAND_PIDS, the port in BY_HAND_PORT
#   by_hand_training WORK
#       wait (10 s at most) until the master reports epoch 2; 1 if it did not

# A port for a job's store that is free here now, from 10000-19999: below
# the range the Slurm fixtures take theirs from (20000-31999, where a
# slurmd of a test running beside this one may be listening) and the
# ephemeral one (32768+).  20 tries; the last drawn if none was free.
by_hand_free_port() {
    local port
    for _ in $(seq 20); do
        port=$((10000 + RANDOM % 10000))
        ! ss -Htln "sport = :$port" 2>/dev/null | grep -q . && break
    done
    echo "$port"
}

by_hand_start() {
    local train=$1 work=$2 env=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    # A port given in BY_HAND_PORT, else a free one (by_hand_free_port).
    BY_HAND_PORT=${BY_HAND_PORT:-$(by_hand_free_port)}
    local secret=$work/secret
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
    chmod 600 "$secret"
    BY_HAND_PIDS=()
    for rank in 0 1 2 3; do
        env EMBER_RANK=$rank EMBER_WORLD_SIZE=4 EMBER_INIT=tcp://127.0.0.1:$BY_HAND_PORT \
            EMBER_SECRET_FILE="$secret" UCX_NET_DEVICES=lo "${env[@]}" \
            "$train" "$@" >"$work/rank$rank.log" 2>&1 &
        BY_HAND_PIDS+=($!)
    done
}

by_hand_training() {
    for _ in $(seq 200); do
        grep -q "epoch    2" "$1/rank2.log" && return 0
        sleep 0.05
    done
    return 1
}
