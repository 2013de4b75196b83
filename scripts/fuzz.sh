#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ (build-fuzz/: clang, the whole tree
# with ASan + UBSan, every report fatal) and run each for a bounded time on
# its seed corpus (fuzz/corpus/<target>; safetensors also on
# tests/data/golden).  Prints each target's executions and final coverage;
# fails on any crash, leak, timeout, out-of-memory or sanitizer report,
# naming the input that caused it.
#   scripts/fuzz.sh [TARGET...]   only these (default: every fuzz/fuzz_*.c)
#   FUZZ_SECONDS=90   wall time of all the targets together, split evenly
#   FUZZ_JOBS=2       targets fuzzed at once (one core each)
# New inputs the runs find stay in build-fuzz/fuzz-run/<target>/corpus;
# fuzz/README.md says how to keep one.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-fuzz
seconds=${FUZZ_SECONDS:-90}
jobs=${FUZZ_JOBS:-2}
if (($# > 0)); then
  targets=("$@")
else
  targets=()
  for source in fuzz/fuzz_*.c; do
    name=${source#fuzz/fuzz_}
    targets+=("${name%.c}")
  done
fi

CC=clang cmake -S . -B "$build" -G Ninja -DEMBER_FUZZ=ON -DBUILD_TESTING=OFF \
  -DEMBER_ENABLE_CUDA=OFF -DEMBER_WERROR=ON >/dev/null
cmake --build "$build" --target fuzz -j2
# The seeds in the tree are the generator's (a changed message layout
# changes them: rerun build-fuzz/fuzz/make_corpus fuzz/corpus).
"$build/fuzz/make_corpus" --check fuzz/corpus

# Each target's share: jobs run side by side, so all take ~seconds in all.
per=$((seconds * jobs / ${#targets[@]}))
((per >= 1)) || per=1
echo "fuzz: ${#targets[@]} targets, ${per} s each, $jobs at a time"

fuzz_one() {
  local target=$1 run="$build/fuzz-run/$1"
  local seeds=(fuzz/corpus/"$target") options=()
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/artifacts"
  [[ $target == safetensors ]] && seeds+=(tests/data/golden)
  [[ -f fuzz/$target.dict ]] && options+=(-dict="fuzz/$target.dict")
  # -close_fd_mask=3: ember's own log lines off (libFuzzer's and the
  # sanitizers' reports still come); -timeout per input, -rss_limit_mb
  # also caps a single allocation.
  "$build/fuzz/fuzz_$target" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$run/artifacts/" \
    "${options[@]}" "$run/corpus" "${seeds[@]}" >"$run/log" 2>&1
}

running=0
for target in "${targets[@]}"; do
  [[ -x $build/fuzz/fuzz_$target ]] || { echo "fuzz: no target fuzz_$target" >&2; exit 2; }
  fuzz_one "$target" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
for target in "${targets[@]}"; do
  run="$build/fuzz-run/$target"
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$run/log" | tail -1 || true)
  units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  artifacts=$(find "$run/artifacts" -type f | head -5)
  if [[ -z $done_line || -n $artifacts ]] ||
     grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:' "$run/log"; then
    failed=1
    echo "fuzz_$target: FAILED after ${units:-?} executions"
    grep -E 'invariant|ERROR:|SUMMARY:|runtime error:|^    #[0-9]+ ' "$run/log" | head -25 | sed 's/^/  /'
    for artifact in $artifacts; do
      echo "  input: $artifact (rerun: $build/fuzz/fuzz_$target $artifact)"
      # Rerun with ember's stderr open: a broken invariant says which.
      "$build/fuzz/fuzz_$target" "$artifact" 2>&1 | grep -m3 -E '^fuzz: .*invariant' |
        sed 's/^/  /' || true
    done
  else
    echo "fuzz_$target: ${units:-?} executions; $done_line"
  fi
done
if ((failed)); then
  echo "fuzz: FAILED (logs in $build/fuzz-run/<target>/log)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets clean"
