#!/usr/bin/env bash
# The sparse-heavy DLRM of bench/dlrm_vs_torchrec.sh (configuration b: D 16,
# dense 13 -> 64 -> 16, over 64,1, 26 tables of 1,000,000 rows, B 4096,
# Adagrad lr 0.05) trained three ways in one run, on the same Criteo-format
# file, trainer count, steps and seed:
#   torch     examples/dlrm_torch/dlrm.py: TorchRec's DLRM in plain PyTorch over
#             ember.torch.EmbeddingBagCollection (tables on ember's PS, dense
#             half under DDP gloo)
#   torchrec  TorchRec's own DLRM (bench/peers/torchrec_dlrm.py in the venv of
#             scripts/torchrec-venv.sh); skipped, saying so, without the venv
#   ember     ember-train --model dlrm
# and prints each one's examples/s and the ratios torch/torchrec (target
# >= 1.5) and ember/torch (target <= 1.5).
#
#   bench/dlrm_torch_vs_torchrec.sh
#   STEPS=10 ROWS=100000 bench/dlrm_torch_vs_torchrec.sh
#
# Environment: BUILD (<repo>/build), EMBER_TORCHREC_VENV (<repo>/.venv-torchrec),
# STEPS (20), TRAINERS (2), PS (1),
# ROWS (1000000 a table), SEED (1), PORT (30500: ember's rendezvous ports PORT..,
# the gloo port next to each), KEEP (0; 1 keeps the logs, whose folder is printed),
# ROUNDS (3: every run that many times, alternating; the medians are compared).
# examples/s: torch over its steps after the data is parsed (its clock starts
# at the first step); ember-train from its --metrics epoch lines (all steps,
# the TSV streamed while it trains); TorchRec as its peer prints it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
steps=${STEPS:-20}
trainers=${TRAINERS:-2}
ps=${PS:-1}
rows=${ROWS:-1000000}
seed=${SEED:-1}
base=${PORT:-30500}
rounds=${ROUNDS:-3}
py=${EMBER_TEST_PYTHON:-/usr/bin/python3}
examples=$((steps * 4096 * trainers))
out=$(mktemp -d /tmp/ember-dlrm-torch-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then echo "# logs in $out"; else trap 'rm -rf "$out"' EXIT; fi
export UCX_NET_DEVICES=lo GLOO_SOCKET_IFNAME=lo
die() { echo "dlrm_torch_vs_torchrec: $*" >&2; exit 2; }
for tool in ember-criteo-gen ember-train ember-run; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first"
done
flags=(--embedding-dim 16 --num-embeddings "$rows" --dense-arch-layer-sizes 64,16
    --over-arch-layer-sizes 64,1 --batch-size 4096 --optimizer adagrad --lr 0.05
    --steps "$steps" --seed "$seed" --trainers "$trainers")
"$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed" \
    >/dev/null

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
echo "# sparse-heavy DLRM: 26 x $rows rows x D 16, B 4096, $trainers trainers, $ps PS," \
    "$steps steps, adagrad 0.05, $examples examples (ember-criteo-gen --seed $seed)"

one_round() { # round: appends each run's examples/s to $out/RUN.rates
    local port=$((base + 40 * $1))
    # 1. PyTorch over ember's collection.
    EMBER_INIT=tcp://127.0.0.1:$port PYTHONPATH=$build/python \
        "$build/tools/ember-run" -n $((trainers + ps)) "$py" "$repo/examples/dlrm_torch/dlrm.py" \
        --ps "$ps" "${flags[@]}" --data "criteo:$out/train.tsv" >"$out/torch.log" 2>&1 ||
        { tail -30 "$out/torch.log" >&2; die "the PyTorch DLRM over ember failed"; }
    torch_rate=$(sed -n 's/.*dlrm_torch: .* \([0-9.]*\) examples\/s.*/\1/p' "$out/torch.log" | tail -1)

    # 2. ember-train.
    EMBER_INIT=tcp://127.0.0.1:$((port + 10)) "$build/tools/ember-run" -n $((trainers + ps + 1)) \
        "$build/tools/ember-train" --model dlrm --ps "$ps" "${flags[@]}" \
        --data "criteo:$out/train.tsv" --metrics "$out/ember.json" >"$out/ember.log" 2>&1 ||
        { tail -30 "$out/ember.log" >&2; die "ember-train failed"; }
    ember_rate=$("$py" - "$out/ember.json" <<'EOF'
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
epochs = [e for e in epochs if "epoch" in e]
seconds = sum(e["seconds"] for e in epochs)
examples = sum(e["examples_per_s"] * e["seconds"] if "examples_per_s" in e else e["bags"]
               for e in epochs)
print(f"{examples / seconds:.1f}" if seconds > 0 else "-")
EOF
    )

    # 3. TorchRec, and the PyTorch DLRM over ember on TorchRec's torch.
    trec_rate=- torch_venv_rate=-
    if [ -x "$venv/bin/python" ]; then
        EMBER_INIT=tcp://127.0.0.1:$((port + 30)) PYTHONPATH=$build/python \
            "$build/tools/ember-run" -n $((trainers + ps)) "$venv/bin/python" \
            "$repo/examples/dlrm_torch/dlrm.py" --ps "$ps" "${flags[@]}" --data "criteo:$out/train.tsv" \
            >"$out/torch-venv.log" 2>&1 ||
            { tail -30 "$out/torch-venv.log" >&2; die "the PyTorch DLRM over ember (venv) failed"; }
        torch_venv_rate=$(sed -n 's/.*dlrm_torch: .* \([0-9.]*\) examples\/s.*/\1/p' "$out/torch-venv.log" | tail -1)
        "$venv/bin/python" "$here/peers/torchrec_dlrm.py" "${flags[@]}" --port $((port + 20)) --warmup-steps 0 \
            --data "criteo:$out/train.tsv" >"$out/torchrec.log" 2>&1 ||
            { tail -30 "$out/torchrec.log" >&2; die "the TorchRec peer failed"; }
        trec_rate=$(sed -n 's/^examples\/s \([0-9.]*\).*/\1/p' "$out/torchrec.log")
        trec_rate=${trec_rate:--}
    fi
    echo "${torch_rate:--}" >>"$out/torch.rates"; echo "${torch_venv_rate:--}" >>"$out/torch_venv.rates"
    echo "${trec_rate:--}" >>"$out/trec.rates"; echo "${ember_rate:--}" >>"$out/ember.rates"
    echo "# round $1: torch $torch_rate, torch (venv) $torch_venv_rate, torchrec $trec_rate, ember-train $ember_rate"
}
median() { # the median of a file's numbers, "-" when none
    grep -v '^-$' "$1" | sort -g | awk '{v[NR] = $1} END {if (!NR) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
[ -x "$venv/bin/python" ] || echo "# TorchRec: skipped: no $venv/bin/python (scripts/torchrec-venv.sh makes it)"
for r in $(seq "$rounds"); do one_round "$r"; done
torch_rate=$(median "$out/torch.rates") torch_venv_rate=$(median "$out/torch_venv.rates")
trec_rate=$(median "$out/trec.rates") ember_rate=$(median "$out/ember.rates")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
versions() { "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -; }
debian_torch=$(versions "$py")
venv_torch=$([ -x "$venv/bin/python" ] && versions "$venv/bin/python" || echo -)
printf '%-50s %12s\n' "run (median of $rounds)" "examples/s"
printf '%-50s %12s\n' "pytorch DLRM over ember's EBC (torch $debian_torch)" "$torch_rate" \
    "pytorch DLRM over ember's EBC (torch $venv_torch)" "$torch_venv_rate" \
    "torchrec DLRM (torch $venv_torch)" "$trec_rate" "ember-train --model dlrm" "$ember_rate"
same=$torch_venv_rate
[ "$same" = - ] && same=$torch_rate
echo "torch / torchrec: $(ratio "$same" "$trec_rate") (target >= 1.5; same torch on both sides)"
echo "ember-train / torch: $(ratio "$ember_rate" "$same") (target <= 1.5)"
