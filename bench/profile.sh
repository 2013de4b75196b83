#!/usr/bin/env bash
# bench/profile.sh: where the time of the two benchmark jobs goes.
#
#   bench/profile.sh                 both jobs, phases and CPU seconds
#   PERF=1 bench/profile.sh          and perf's top functions of trainer0 and the PS
#   JOBS=dlrm STEPS=60 bench/profile.sh
#
# The jobs are bench/train_vs_torchrec.sh's: "table", the tutorial model on
# one EmbeddingBag 1,000,000 x 64 (8,192 indices a trainer step, SGD), and
# "dlrm", DLRM sparse-heavy (26 tables of 1,000,000 x 16, B 4096, Adagrad;
# ember-criteo-gen's examples in npy).  2 trainers, 1 PS, the master; UCX
# shared memory.  For each job it prints:
#   - each trainer's training time by phase, from ember-train's --metrics
#     "trainer_time" lines: data (the next batch), lookup (split and sent),
#     lookup wait, forward, backward, push (the gradients sent), dense step
#     (the allreduce and the optimizer), other (reports);
#   - each process's CPU seconds (user + system) over the whole run, set-up
#     included, and its wall seconds;
#   - with PERF=1, perf's top functions (self time, whole run) of trainer0
#     and of the PS (perf record -g; a VM without hardware counters samples
#     the CPU clock).
#
# Environment: BUILD (<repo>/build), PYTHON (/usr/bin/python3, with numpy),
# JOBS ("table dlrm"), STEPS (the DLRM job's, 60; the table job runs 21
# epochs of 10 steps), ROWS (1000000: each table's rows), BATCH (4096: the
# DLRM job's per trainer), PERF (0), TOP (15: perf's lines per process), KEEP
# (0: 1 keeps the logs, whose folder is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
jobs=${JOBS:-table dlrm}
steps=${STEPS:-60}
perf=${PERF:-0}
python=${PYTHON:-/usr/bin/python3}
top=${TOP:-15}
rows=${ROWS:-1000000}
batch=${BATCH:-4096}
export UCX_TLS=${UCX_TLS:-sm,self} UCX_NET_DEVICES=lo
die() { echo "profile: $*" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]{0,6}$ ]] || die "STEPS '$steps' is not a positive integer"
[[ $top =~ ^[1-9][0-9]{0,3}$ ]] || die "TOP '$top' is not a positive integer"
[[ $rows =~ ^[1-9][0-9]{0,9}$ ]] || die "ROWS '$rows' is not a positive integer"
[[ $batch =~ ^[1-9][0-9]{0,6}$ ]] || die "BATCH '$batch' is not a positive integer"
[[ $perf =~ ^[01]$ ]] || die "PERF '$perf' is not 0 or 1"
for tool in ember-run ember-train ember-criteo-gen; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
[ -x /usr/bin/time ] || die "/usr/bin/time missing (apt-get install time)"
if [ "$perf" = 1 ]; then command -v perf >/dev/null || die "perf missing (apt-get install linux-perf)"; fi
out=$(mktemp -d /tmp/ember-profile.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then echo "# logs in $out"; else trap 'rm -rf "$out"' EXIT; fi

# Each rank under /usr/bin/time; trainer0 (rank 0) and the PS (rank 3) under
# perf with PERF=1.
cat >"$out/rank.sh" <<EOF
#!/bin/bash
log=$out/\$JOB.rank\$EMBER_RANK
if [ "$perf" = 1 ] && { [ "\$EMBER_RANK" = 0 ] || [ "\$EMBER_RANK" = 3 ]; }; then
    exec /usr/bin/time -o "\$log.time" -f "%U %S %e" perf record -q -F 999 -g -o "\$log.perf" "\$@"
fi
exec /usr/bin/time -o "\$log.time" -f "%U %S %e" "\$@"
EOF
chmod +x "$out/rank.sh"

run_job() { # name args...
    local name=$1; shift
    JOB=$name "$build/tools/ember-run" -n 4 "$out/rank.sh" "$build/tools/ember-train" \
        --trainers 2 --ps 1 --seed 1 --metrics "$out/$name.json" "$@" >"$out/$name.log" 2>&1 || {
        tail -20 "$out/$name.log" >&2; die "ember-train failed ($name)"; }
}

report() { # name
    local name=$1
    echo "## $name: $(grep -o 'done: .*s/s' "$out/$name.log" | head -1 | sed 's/^\[[0-9]*\] //')"
    "$python" - "$out/$name.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in rows if "trainer_time" in r]
names = ["data", "lookup", "lookup wait", "forward", "backward", "push", "dense step", "other"]
print("%-10s %8s " % ("trainer", "seconds") + " ".join("%11s" % n for n in names))
for r in timed:
    print("%-10s %8.3f " % ("trainer%d" % r["trainer_time"], r["seconds"]) +
          " ".join("%10.1f%%" % (100 * r[n] / r["seconds"]) for n in names))
PY
    printf '%-10s %10s %10s %10s\n' process "user s" "system s" "wall s"
    local role
    for r in 0 1 2 3; do
        case $r in 0 | 1) role=trainer$r ;; 2) role=master ;; 3) role=ps0 ;; esac
        read -r user sys wall <"$out/$name.rank$r.time"
        printf '%-10s %10s %10s %10s\n' "$role" "$user" "$sys" "$wall"
    done
    if [ "$perf" = 1 ]; then
        for r in 0 3; do
            echo "### perf, $([ $r = 0 ] && echo trainer0 || echo ps0): top $top functions by self time (whole run)"
            # (head ends the pipe early: perf's SIGPIPE is no failure)
            { perf report -i "$out/$name.rank$r.perf" --no-children --sort symbol --stdio -g none \
                2>/dev/null | grep -E '^ +[0-9.]+%' | head -n "$top"; } || true
        done
    fi
    echo
}

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); load $(cut -d' ' -f1 /proc/loadavg); UCX_TLS $UCX_TLS"
for job in $jobs; do
    case $job in
        table)
            run_job table --rows "$rows" --dim 64 --classes 8 --min-indices 8192 \
                --max-indices 8192 --batches 10 --epochs 21 --consistency sync ;;
        dlrm)
            "$build/tools/ember-criteo-gen" --examples $((steps * batch * 2)) --out "$out/train.tsv" \
                --seed 1 >/dev/null
            "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" >/dev/null ||
                die "cannot write the npy layout"
            rm -f "$out/train.tsv"
            run_job dlrm --model dlrm --embedding-dim 16 --num-embeddings "$rows" \
                --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1 --batch-size "$batch" \
                --optimizer adagrad --lr 0.05 --data "criteo-npy:$out/train" --steps "$steps" ;;
        *) die "JOBS: '$job' is not table or dlrm" ;;
    esac
    report "$job"
done
