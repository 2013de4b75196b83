#!/usr/bin/env bash
# ember-train beside the PyTorch tutorial program (bench/peers/torch_ddp_rpc.py)
# on this machine, same sizes, batches and process layout (2 trainers, master,
# 1 PS), in one run; prints steps/s of each and the ratio, and the PS's
# resident memory against its table + optimizer state.
#
#   bench/train_vs_torch.sh            both configurations
#   QUICK=1 bench/train_vs_torch.sh    fewer epochs (a smoke run)
#
# Environment: BUILD (default <repo>/build), PYTHON (default /usr/bin/python3,
# Debian's python3-torch), EMBER_TLS_LIST (default "sm,self tcp,self").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
python=${PYTHON:-/usr/bin/python3}
run=$build/tools/ember-run
train=$build/tools/ember-train
peer=$here/peers/torch_ddp_rpc.py
tls_list=${EMBER_TLS_LIST:-"sm,self tcp,self"}
quick=${QUICK:-0}
out=$(mktemp -d /tmp/ember-train-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
export UCX_NET_DEVICES=lo

[ -x "$train" ] || { echo "build ember first: $train missing" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || {
    echo "PyTorch not found for $python (apt-get install python3-torch)" >&2; exit 2; }

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ember: "done: N steps (B bags) in S s: X steps/s ..." from the master.
ember_run() { # name tls consistency args...
    local name=$1 tls=$2 mode=$3; shift 3
    UCX_TLS=$tls EMBER_LOG_LEVEL=info "$run" -n 4 "$train" --consistency "$mode" "$@" \
        >"$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
    grep -o 'in [0-9.]* s: [0-9]* steps/s' "$out/$name.log" | awk '{print $4}'
}
ember_memory() { # name -> "resident/(table+optimizer)"
    grep -o 'ps0: table [0-9.]* MiB, optimizer state [0-9.]* MiB, other [0-9.]* MiB, resident [0-9.]* MiB' \
        "$out/$1.log" | awk '{printf "%.1f MiB / (%.1f + %.1f MiB) = %.2f", $13, $3, $7, $13 / ($3 + $7)}'
}
ember_resident() { grep -o 'resident [0-9.]* MiB' "$out/$1.log" | awk '{ print $2 }'; }
torch_run() { # name args...
    local name=$1; shift
    "$python" "$peer" --port "$(free_port)" "$@" >"$out/$name.log" 2>&1 ||
        { cat "$out/$name.log" >&2; exit 1; }
    grep '^RESULT' "$out/$name.log" | grep -o 'steps_per_s=[0-9.]*' | cut -d= -f2
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), UCX $(ucx_info -v | sed -n 's/^# Version //p'), torch $("$python" -c 'import torch; print(torch.__version__)')"

small_epochs=100 large_epochs=5 torch_large_batches=20
# QUICK keeps ember's 50 large-table steps (short beside the table's
# creation): with 10, the figure was mostly the first steps and swung widely
# between runs.
[ "$quick" = 1 ] && small_epochs=10 torch_large_batches=3
small=(--epochs $small_epochs --batches 10)
large=(--rows 1000000 --dim 64 --min-indices 2000 --max-indices 4000)

echo
echo "## tutorial sizes: EmbeddingBag(100, 16, sum), Linear(16, 8), 20-50 indices, ${small_epochs}x10 batches"
t_small=$(torch_run torch-small "${small[@]}")
printf '%-34s %12s steps/s\n' "PyTorch RPC+DDP (TensorPipe, gloo)" "$t_small"
for tls in $tls_list; do
    for mode in async sync; do
        e=$(ember_run "small-$tls-$mode" "$tls" "$mode" "${small[@]}")
        printf '%-34s %12s steps/s  %6sx\n' "ember $mode UCX_TLS=$tls" "$e" "$(ratio "$e" "$t_small")"
    done
done

echo
echo "## large table: EmbeddingBag(1000000, 64, sum), 2000-4000 indices per batch"
t_large=$(torch_run torch-large "${large[@]}" --epochs 1 --batches $torch_large_batches)
printf '%-34s %12s steps/s\n' "PyTorch RPC+DDP (TensorPipe, gloo)" "$t_large"
for tls in $tls_list; do
    for mode in async sync; do
        name="large-$tls-$mode"
        e=$(ember_run "$name" "$tls" "$mode" "${large[@]}" --epochs $large_epochs --batches 10)
        printf '%-34s %12s steps/s  %6sx   PS memory %s\n' "ember $mode UCX_TLS=$tls" "$e" \
            "$(ratio "$e" "$t_large")" "$(ember_memory "$name")"
    done
done
e=$(ember_run large-adagrad "sm,self" sync "${large[@]}" --epochs 1 --batches 10 --optimizer rowwise_adagrad)
printf '%-34s %12s steps/s           PS memory %s\n' "ember sync rowwise_adagrad" "$e" "$(ember_memory large-adagrad)"
e=$(ember_run large-adam "sm,self" sync "${large[@]}" --epochs 1 --batches 10 --optimizer adam)
printf '%-34s %12s steps/s           PS memory %s\n' "ember sync adam" "$e" "$(ember_memory large-adam)"
# fp16 rows: the PS's resident memory beside the same job's with fp32 rows.
e=$(ember_run large-fp16 "sm,self" sync "${large[@]}" --epochs $large_epochs --batches 10 --table-dtype fp16)
printf '%-34s %12s steps/s  %6sx   PS memory %s MiB resident (fp32 rows: %s MiB)\n' \
    "ember sync fp16 rows UCX_TLS=sm,self" "$e" "$(ratio "$e" "$t_large")" \
    "$(ember_resident large-fp16)" "$(ember_resident "large-sm,self-sync")"
echo
echo "targets: >= 50x at tutorial sizes, >= 100x with the large table, PS memory <= 1.2x"
