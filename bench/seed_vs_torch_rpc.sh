#!/usr/bin/env bash
# The tutorial's DDP + RPC program (tests/python/programs/hybrid.py: the
# seed's calls in the seed's roles, 2 trainers, master, PS, its sizes and
# 100 epochs of 10 batches) on PyTorch RPC and on ember through the `ember`
# package (only the torch.distributed.{rpc, autograd, nn, optim} imports
# differ), alternating, ROUNDS times each, under torch.multiprocessing.spawn
# as the tutorial runs it.  Prints every run's steps/s (the job's: both
# trainers' steps over the training time), each side's median and the ratio;
# and, as a ceiling, the same steps with no RPC at all (each trainer a table
# of its own, --backend local): what the trainers' own PyTorch work allows.
#
#   bench/seed_vs_torch_rpc.sh                 2 trainers, 100 epochs, 3 rounds
#   TRAINERS=1 EPOCHS=20 ROUNDS=1 bench/seed_vs_torch_rpc.sh
#
# Environment: BUILD (default <repo>/build, its python/ is the package),
# PYTHON (default /usr/bin/python3, Debian's python3-torch).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
python=${PYTHON:-/usr/bin/python3}
program=$here/../tests/python/programs/hybrid.py
trainers=${TRAINERS:-2} epochs=${EPOCHS:-100} rounds=${ROUNDS:-3}
[ -f "$build/python/ember/__init__.py" ] || { echo "build ember first: no $build/python" >&2; exit 2; }
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} UCX_NET_DEVICES=lo EMBER_LOG_LEVEL=warn
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
out=$(mktemp -d /tmp/ember-seed-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT

# One run: the job's steps/s (every trainer's steps over the longest time).
one() { # backend round
    local log=$out/$1.$2.log
    "$python" "$program" --backend "$1" --trainers "$trainers" --epochs "$epochs" \
        --rpc-port "$(free_port)" --ddp-port "$(free_port)" >"$log" 2>&1 ||
        { tail -30 "$log" >&2; exit 1; }
    grep -o 'trainer[0-9]*: [0-9]* steps in [0-9.]* s' "$log" |
        awk '{steps += $2; if ($5 > t) t = $5} END {printf "%.1f\n", steps / t}'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "seed program: $trainers trainer(s), $epochs epochs x 10 batches, $rounds round(s), $(nproc) cores"
for r in $(seq "$rounds"); do
    t=$(one torch "$r"); e=$(one ember "$r"); l=$(one local "$r")
    echo "round $r: torch rpc $t steps/s, ember $e steps/s, no rpc (ceiling) $l steps/s"
    echo "$t" >>"$out/torch"; echo "$e" >>"$out/ember"; echo "$l" >>"$out/local"
done
t=$(median <"$out/torch"); e=$(median <"$out/ember"); l=$(median <"$out/local")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "median: torch rpc $t steps/s, ember $e steps/s, no rpc $l steps/s"
echo "ember/torch rpc $(ratio "$e" "$t")x; ceiling/torch rpc $(ratio "$l" "$t")x; ember/ceiling $(ratio "$e" "$l")"
