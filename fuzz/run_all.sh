#!/usr/bin/env bash
# Runs every libFuzzer target of a `fuzz` build for a bounded time and fails on the first crash.
#
#   fuzz/run_all.sh [BUILD_DIR] [SECONDS]        (defaults: build/fuzz, $DSA_FUZZ_SECONDS or 60)
#
# Each target starts from its seed corpus fuzz/corpus/<name>/ plus fuzz/regressions/<name>/; new
# coverage goes to a scratch corpus under BUILD_DIR (not into the repository). A crash leaves its
# input as BUILD_DIR/fuzz-artifacts/<name>/crash-*: minimise it (-minimize_crash=1), fix the bug,
# and add the input to fuzz/regressions/<name>/ so the `fuzz` test preset replays it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build/fuzz}"
seconds="${2:-${DSA_FUZZ_SECONDS:-60}}"
targets=(ops safetensors checkpoint_index config golden model)

status=0
for t in "${targets[@]}"; do
  exe="$build/fuzz/dsa_fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "fuzz: $exe not built (cmake --workflow --preset fuzz)" >&2
    exit 2
  fi
  work="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  mkdir -p "$work" "$artifacts"
  dirs=("$work" "$root/fuzz/corpus/$t")
  [ -d "$root/fuzz/regressions/$t" ] && dirs+=("$root/fuzz/regressions/$t")
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  echo "fuzz: $t for ${seconds}s"
  # -rss_limit_mb/-malloc_limit_mb: a small input must not make the library allocate gigabytes.
  if ! "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "${dirs[@]}" \
        > "$build/fuzz-$t.log" 2>&1; then
    echo "fuzz: $t FAILED; input in $artifacts/, log $build/fuzz-$t.log" >&2
    tail -n 40 "$build/fuzz-$t.log" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/fuzz-$t.log" | tr '\n' ' '
    echo
  fi
done
exit $status
