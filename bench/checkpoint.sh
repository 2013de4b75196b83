#!/usr/bin/env bash
# bench/checkpoint.sh: writing and loading a checkpoint of a large table
# against the disk's own sequential speed, and training with checkpoints
# against without, in one run (issue 23's benchmark).
#
#   bench/checkpoint.sh
#   ROWS=1000000 EPOCHS=2 bench/checkpoint.sh     a smaller, quicker run
#
# 1. disk: dd writes a file of the checkpoint's size (bs=16M, oflag=direct,
#    conv=fsync) and reads it back (iflag=direct), MB/s; before the write,
#    after the load and at the end, the median taken (a shared disk's speed
#    moves between them; all three are printed).
# 2. write: a job (ROWS x DIM table, SGD so no optimizer state, WRITE_BATCHES
#    steps) checkpoints at its end; the bytes and the slowest file's write
#    seconds from its --metrics line give GB/s, against dd's write (target
#    >= 70%), and the PS's copy seconds are training's pause.
# 3. load: the page cache dropped (as root, for the whole machine; else, or
#    with DROP_CACHES=0, the table says it was not), a job resumes
#    that checkpoint for WRITE_BATCHES more steps; the master's verification
#    (every file read and its CRC-32C checked: from its "roles:" line to
#    "resuming from", timed as the lines arrive) and the PS's "tables
#    restored ... in X s" (EMBER_LOG_LEVEL=info), GB/s, against dd's read.
# 4. training: the same table, EPOCHS x BATCHES steps of MIN_INDICES to
#    MAX_INDICES indices per batch, with --checkpoint-every EVERY (B) and
#    without (A), ROUNDS times A B; steps/s from the master's "done:" line
#    (its time includes each checkpoint's pause; the last checkpoint is the
#    job's end), and the ratio of the means (target >= 95%).
# Prints each run's line, then one markdown table.
#
# Environment: BUILD (<repo>/build: ember-run, ember-train), DIR (where the
# files go, on the disk measured: a fresh folder inside it, removed at the
# end; <repo> by default), ROWS (10000000), DIM (64), PS (1), WRITE_BATCHES
# (20), EPOCHS (5), BATCHES (1000), EVERY (1000), KEEP_CKPT (2:
# --checkpoint-keep of step 4), MIN_INDICES (2000), MAX_INDICES (4000),
# ROUNDS (2), SEED (1), DROP_CACHES (1), KEEP (0: 1 keeps the folder and its
# logs).  A run of the defaults takes about 5 minutes and needs 3 x 2.56 GB
# of disk and 6 GB of memory; both are checked first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
rows=${ROWS:-10000000}
dim=${DIM:-64}
ps=${PS:-1}
write_batches=${WRITE_BATCHES:-20}
epochs=${EPOCHS:-5}
batches=${BATCHES:-1000}
every=${EVERY:-1000}
keep_ckpt=${KEEP_CKPT:-2}
min_indices=${MIN_INDICES:-2000}
max_indices=${MAX_INDICES:-4000}
rounds=${ROUNDS:-2}
seed=${SEED:-1}
drop_caches=${DROP_CACHES:-1}
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

die() { echo "checkpoint.sh: $*" >&2; exit 2; }
for n in "$rows" "$dim" "$ps" "$write_batches" "$epochs" "$batches" "$every" "$keep_ckpt" \
    "$min_indices" "$max_indices" "$rounds"; do
    [[ $n =~ ^[1-9][0-9]{0,9}$ ]] ||
        die "ROWS, DIM, PS, WRITE_BATCHES, EPOCHS, BATCHES, EVERY, KEEP_CKPT, MIN_INDICES, MAX_INDICES, ROUNDS: '$n' is not a positive integer"
done
[[ $seed =~ ^[0-9]{1,9}$ ]] || die "SEED '$seed' is not an integer"
[[ $drop_caches == [01] ]] || die "DROP_CACHES '$drop_caches' is not 0 or 1"
((min_indices <= max_indices)) || die "MIN_INDICES $min_indices is above MAX_INDICES $max_indices"
for tool in ember-run ember-train; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
parent=${DIR:-$repo}
[ -d "$parent" ] || die "DIR $parent is not a directory"
work=$(mktemp -d "$parent/.ember-ckptbench.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
    echo "# files and logs in $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# The table's bytes; the disk must hold KEEP_CKPT + 1 checkpoints (one is
# written while the kept ones are there) and memory the table twice (its
# snapshot) on the PS.
table_bytes=$((rows * dim * 4))
free_disk=$(($(df -P -k "$work" | awk 'NR == 2 { print $4 }') * 1024))
((free_disk > (keep_ckpt + 1) * table_bytes + (1 << 30))) ||
    die "$work: $((free_disk >> 20)) MiB free, a run needs $((((keep_ckpt + 1) * table_bytes + (1 << 30)) >> 20)) MiB"
free_memory=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
((free_memory > 2 * table_bytes + (1 << 30))) ||
    die "$((free_memory >> 20)) MiB of memory available, the PS needs $(((2 * table_bytes + (1 << 30)) >> 20)) MiB"

# dd's MB/s, the file of the table's size in 16 MiB blocks.
dd_blocks=$(((table_bytes + (16 << 20) - 1) / (16 << 20)))
# dd's "N bytes (...) copied, S s, ..." as MB/s (its own figure has two digits).
dd_rate() { sed -n 's/^\([0-9]*\) bytes .* copied, \([0-9.]*\) s, .*/\1 \2/p' |
    awk '$2 > 0 { printf "%.0f\n", $1 / $2 / 1e6 }'; }
dd_round() { # -> "WRITE_MB/s READ_MB/s"
    local file=$work/dd.bin w r
    w=$(dd if=/dev/zero of="$file" bs=16M count="$dd_blocks" oflag=direct conv=fsync 2>&1 | dd_rate)
    r=$(dd if="$file" of=/dev/null bs=16M iflag=direct 2>&1 | dd_rate)
    rm -f "$file"
    if [ -z "$w" ] || [ -z "$r" ]; then die "dd printed no rate on $work"; fi
    echo "$w $r"
}

# Each line of the job's output after the time it arrived ($EPOCHREALTIME).
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
job() { # name args...: ember-train under ember-run, its log in $work/name.log
    local name=$1
    shift
    if ! EMBER_LOG_LEVEL=info "$build/tools/ember-run" -n $((3 + ps)) "$build/tools/ember-train" \
        --ps "$ps" --rows "$rows" --dim "$dim" --optimizer sgd --seed "$seed" "$@" 2>&1 |
        stamp >"$work/$name.log"; then
        tail -n 30 "$work/$name.log" >&2
        die "ember-train failed ($name); its log is above"
    fi
}
# The master's line of a job, without its time and rank.
line_of() { grep -m 1 "^[0-9.]* \[[0-9]*\] $2" "$work/$1.log" | cut -d' ' -f3-; }
time_of() { grep -m 1 "^[0-9.]* \[[0-9]*\] $2" "$work/$1.log" | cut -d' ' -f1; }
json_field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$work/$1.json" | tail -n 1; }
steps_per_s() { line_of "$1" 'done:' | sed -n 's/.* s: \([0-9.]*\) steps\/s.*/\1/p'; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $(free -g | awk '/^Mem:/ { print $2 }') GB memory"
echo "# disk: $(df -P -h "$work" | awk 'NR == 2 { print $1 ", " $2 " (" $4 " free)" }'), files in $work"
echo "# table ${rows} x ${dim} fp32 ($(calc '%.2f' "$table_bytes / 1e9") GB), sgd, $ps PS, 2 trainers"

dd_w=() dd_r=()
dd_measure() {
    local w r
    read -r w r <<<"$(dd_round)"
    dd_w+=("$w")
    dd_r+=("$r")
    echo "dd: write $w MB/s, read $r MB/s"
}
dd_measure

# 2. write
job write --epochs 1 --batches "$write_batches" --checkpoint-dir "$work/ck" \
    --metrics "$work/write.json"
line_of write 'checkpoint after step'
bytes=$(json_field write bytes)
write_s=$(json_field write write_seconds)
copy_s=$(json_field write copy_seconds)
if [ -z "$bytes" ] || [ -z "$write_s" ] || [ -z "$copy_s" ]; then
    die "no checkpoint line in write.json"
fi

# 3. load
if [ "$drop_caches" = 0 ]; then
    dropped="page cache left (DROP_CACHES=0): the load may read memory"
elif { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    dropped="page cache dropped"
else
    dropped="page cache NOT dropped (not root): the load may read memory"
    echo "# $dropped" >&2
fi
job load --epochs 2 --batches "$write_batches" --resume "$work/ck"
line_of load 'resuming from'
restored=$(line_of load '.*tables restored from')
echo "$restored"
restore_s=$(sed -n 's/.* in \([0-9.]*\) s$/\1/p' <<<"$restored")
verify_s=$(calc '%.3f' "$(time_of load 'resuming from') - $(time_of load 'roles:')")
[ -n "$restore_s" ] || die "no 'tables restored' line in load.log"
rm -rf "$work/ck"
dd_measure

# 4. training with and without checkpoints
train=(--epochs "$epochs" --batches "$batches" --min-indices "$min_indices"
    --max-indices "$max_indices")
a_rates=() b_rates=()
for ((round = 1; round <= rounds; round++)); do
    job "a$round" "${train[@]}"
    a_rates+=("$(steps_per_s "a$round")")
    echo "round $round A (no checkpoints): $(line_of "a$round" 'done:')"
    job "b$round" "${train[@]}" --checkpoint-dir "$work/ck$round" --checkpoint-every "$every" \
        --checkpoint-keep "$keep_ckpt" --metrics "$work/b$round.json"
    b_rates+=("$(steps_per_s "b$round")")
    echo "round $round B (every $every): $(line_of "b$round" 'done:')"
    grep -o 'checkpoint after step [0-9]*: .*' "$work/b$round.log" | sed 's/: [^ ]*,/:/; s/^/    /'
    # what training changed under each write (the PS's copy-on-write)
    grep -o 'the checkpoint of step [0-9]* was written while .*' "$work/b$round.log" |
        sed 's/^/    /'
    rm -rf "$work/ck$round"
done
# Each B run's pauses: copy and wait seconds, its first checkpoint apart
# (the first copy also faults in the snapshot's memory).
pause_fields() { sed -n 's/.*"copy_seconds": \([0-9.]*\), "wait_seconds": \([0-9.]*\).*/\1 \2/p' "$1"; }
pauses=$(for f in "$work"/b*.json; do pause_fields "$f" | sed '1s/^/first /; 2,$s/^/later /'; done |
    awk '{ c += $2; w += $3; n++ } $1 == "first" { f += $2; nf++ } $1 == "later" { l += $2; nl++ }
         END { printf "%.2f s copy + %.2f s wait over %d checkpoints|%.3f|%.3f", c, w, n, f / nf, nl ? l / nl : 0 }')
IFS='|' read -r pauses first_copy later_copy <<<"$pauses"

dd_measure
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
dd_write=$(median "${dd_w[@]}")
dd_read=$(median "${dd_r[@]}")
# MB/s of BYTES in SECONDS, and PART as a percentage of WHOLE; "-" where a
# time printed to its precision is 0 (a tiny table).
rate() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", b / s / 1e6; else print "-" }'; }
percent() { awk -v p="$1" -v w="$2" 'BEGIN { if (p != "-" && w > 0) printf "%.0f", 100 * p / w; else print "-" }'; }
write_mbs=$(rate "$bytes" "$write_s")
verify_mbs=$(rate "$bytes" "$verify_s")
restore_mbs=$(rate "$bytes" "$restore_s")
load_s=$(calc '%.3f' "$verify_s + $restore_s")
load_mbs=$(rate "$bytes" "$load_s")
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f", s / NR }'; }
a_mean=$(mean "${a_rates[@]}")
b_mean=$(mean "${b_rates[@]}")
pass() { awk -v v="$1" -v t="$2" 'BEGIN { print (v == "-" ? "-" : v >= t ? "PASS" : "MISS") }'; }
write_pct=$(percent "$write_mbs" "$dd_write")
train_pct=$(calc '%.1f' "100 * $b_mean / $a_mean")

echo
echo "| measure | value | against | ratio | target |"
echo "|:--|--:|:--|--:|:--|"
echo "| disk write, dd oflag=direct conv=fsync, median | $dd_write MB/s | (${dd_w[*]}) | | |"
echo "| disk read, dd iflag=direct, median | $dd_read MB/s | (${dd_r[*]}) | | |"
echo "| checkpoint write: $(calc '%.1f' "$bytes / 1048576") MiB in $(calc '%.2f' "$write_s") s | $write_mbs MB/s | dd write | ${write_pct}% | >= 70%: $(pass "$write_pct" 70) |"
echo "| pause (the PS snapshots its tables), the write job's checkpoint | $(calc '%.3f' "$copy_s") s | | | |"
echo "| pause, training: first checkpoint of a run, mean | $first_copy s | | | |"
echo "| pause, training: later checkpoints, mean | $later_copy s | | | |"
echo "| load: master verifies (reads, CRC-32C), $dropped | $verify_mbs MB/s ($verify_s s) | dd read | $(percent "$verify_mbs" "$dd_read")% | |"
echo "| load: PS restores its rows | $restore_mbs MB/s ($restore_s s) | dd read | $(percent "$restore_mbs" "$dd_read")% | |"
echo "| load: both | $load_mbs MB/s ($load_s s) | dd read | $(percent "$load_mbs" "$dd_read")% | |"
echo "| training, $((epochs * batches)) steps of each trainer, $min_indices-$max_indices indices, no checkpoints | $a_mean steps/s | (${a_rates[*]}) | | |"
echo "| training, a checkpoint every $every steps (keep $keep_ckpt) | $b_mean steps/s | (${b_rates[*]}); $pauses | ${train_pct}% | >= 95%: $(pass "$train_pct" 95) |"
