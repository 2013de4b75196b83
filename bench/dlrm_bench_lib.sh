# bench/dlrm_bench_lib.sh: what bench/dlrm_vs_torchrec.sh and
# bench/dlrm_dcn_vs_torchrec.sh share, sourced by both after they set
# python, peer, out, build, train, trainers, ps, ember_flags and die.
# shellcheck shell=bash disable=SC2154  # the sourcing script's variables

torchrec_run() { # name args...
    local name=$1; shift
    "$python" "$peer" "$@" >"$out/$name.log" 2>&1 || {
        cat "$out/$name.log" >&2; die "the TorchRec peer failed ($name)"; }
}
# "RATE AUC STEP": examples/s over the timed steps, the last eval's AUC and step.
torchrec_result() {
    local rate eval
    rate=$(sed -n 's/^examples\/s \([0-9.]*\).*/\1/p' "$out/$1.log")
    eval=$(sed -n 's/^eval step \([0-9]*\): auc \([0-9.]*\).*/\2 \1/p' "$out/$1.log" | tail -n 1)
    echo "${rate:--} ${eval:-- -}"
}
ember_run() { # name args...
    local name=$1; shift
    "$build/tools/ember-run" -n $((trainers + ps + 1)) \
        "$train" --model dlrm --ps "$ps" --metrics "$out/$name.json" "$@" \
        ${ember_flags[@]+"${ember_flags[@]}"} >"$out/$name.log" 2>&1 || {
        cat "$out/$name.log" >&2; die "ember-train failed ($name)"; }
}
# "RATE AUC STEP" from --metrics: the epochs' examples over their seconds
# (examples_per_s where the epoch lines have it, else bags, which are examples
# for DLRM), the last eval line's AUC and step.
ember_result() {
    "$python" - "$out/$1.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
epochs = [l for l in lines if "epoch" in l]
evals = [l for l in lines if "eval_step" in l]
seconds = sum(e["seconds"] for e in epochs)
examples = sum(e["examples_per_s"] * e["seconds"] if "examples_per_s" in e else e["bags"]
               for e in epochs)
rate = f"{examples / seconds:.1f}" if epochs and seconds > 0 else "-"
print(rate, f"{evals[-1]['auc']:.6f} {evals[-1]['eval_step']}" if evals else "- -")
PY
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
diff_of() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.4f", a - b }'; }
