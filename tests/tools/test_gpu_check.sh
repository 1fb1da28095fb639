#!/usr/bin/env bash
# tools/gpu_check.sh's sanitize step without a GPU. Stand-ins for nvidia-smi and compute-sanitizer
# run the real CUDA test executables of BUILD_DIR (each device case skips without a GPU), so that
# the step's bookkeeping is checked where CI runs, not first on a borrowed GPU: which runs start,
# the slowest first, with which options and environment, and how ok, FAILED, TIMEOUT, SKIPPED and
# NOT RUN are reported.
#
#   tests/tools/test_gpu_check.sh BUILD_DIR      (a configured and built CUDA build)
set -u

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build="$(cd "$1" && pwd)" || exit 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"

cat > "$work/bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "Stand-in GPU, 9.0, 0.0, 1 MiB"
EOF

# Records its tool, DSA_TEST_UNDER_SANITIZER and arguments, runs the command (a skip, exit 77, is
# a pass here), and reports a hazard for racecheck runs matching FAKE_HAZARD or sleeps first for
# runs matching FAKE_SLOW.
cat > "$work/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
tool="" all="$*"
while [[ $# -gt 0 && "$1" == --* ]]; do
  [ "$1" = --tool ] && tool="$2"
  shift 2
done
echo "$tool|${DSA_TEST_UNDER_SANITIZER:-unset}|$all" >> "$FAKE_LOG"
echo "========= COMPUTE-SANITIZER"
if [[ -n "${FAKE_SLOW:-}" && "$all" =~ $FAKE_SLOW ]]; then sleep 30; fi
"$@" > /dev/null 2>&1
rc=$?
((rc == 77)) && rc=0
if [[ -n "${FAKE_HAZARD:-}" && "$tool" == racecheck && "$all" =~ $FAKE_HAZARD ]]; then
  echo "========= Error: Race reported between Write access at void fake_kernel()+0x10"
  echo "=========     and Read access at void fake_kernel()+0x20 [4 hazards]"
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
  exit 99
fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
chmod +x "$work/bin/nvidia-smi" "$work/bin/compute-sanitizer"

failures=0
expect() {  # expect DESCRIPTION COMMAND...: the command must succeed
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}

# ---- one pass over a selection: a hazard, a timeout, racecheck's skips, the options ----------
export PATH="$work/bin:$PATH"
# No device, also on a GPU machine (gpu_check's own test step runs this test): every case skips.
export CUDA_VISIBLE_DEVICES=""
sel='validate|model_transformer|ops_dense#10|ops_sparse_mha_attention#02|ops_topk#0[26]|memory#04'
FAKE_LOG="$work/log1" FAKE_HAZARD='sparse_mha_attention' FAKE_SLOW='every score equal.*a row of NaN' \
  "$root/tools/gpu_check.sh" --no-configure --build "$build" --steps sanitize --jobs 2 --sanitize-jobs 2 \
  --sanitize-timeout 4 --sanitize-only "$sel" "$work/out1" > "$work/out1.txt" 2>&1
rc=$?
report="$work/out1/report.txt"
log="$work/log1"
expect "a hazard fails the run (exit 1)" test "$rc" = 1
expect "the configure step is skipped with --no-configure" grep -q '^step configure: SKIPPED (--no-configure' "$report"
expect "the racecheck run with a hazard is FAILED" grep -q '^step sanitize_racecheck_ops_sparse_mha_attention.02: FAILED (exit 99, 1 reports' "$report"
expect "the same case passes memcheck" grep -q '^step sanitize_memcheck_ops_sparse_mha_attention.02: ok' "$report"
expect "a run past --sanitize-timeout is TIMEOUT" grep -q '^step sanitize_racecheck_ops_topk.06: TIMEOUT after 4 s, no hazard' "$report"
for skipped in validate_tiny_model model_transformer.02 model_transformer.05; do
  expect "racecheck skips $skipped" grep -q "^step sanitize_racecheck_${skipped}: SKIPPED" "$report"
  expect "memcheck runs $skipped" grep -q "^step sanitize_memcheck_${skipped}: ok" "$report"
done
for kept in model_transformer.03 model_transformer.04 validate_primitives; do
  expect "racecheck runs $kept" grep -q "^step sanitize_racecheck_${kept}: ok" "$report"
done
expect "every run sees DSA_TEST_UNDER_SANITIZER=its tool" bash -c "! grep -vE '^([a-z]+)\|\1\|' '$log'"
expect "initcheck replays the model on the SIMT linear" bash -c \
  "grep '^initcheck|.*--model' '$log' | grep -q -- '--cuda-linear simt\$'"
expect "the other tools replay it on cuBLAS" bash -c \
  "! grep -E '^(memcheck|synccheck)\|.*--model' '$log' | grep -q -- '--cuda-linear'"
workers=$(( $(nproc 2>/dev/null || echo 2) / 2 )); ((workers >= 1)) || workers=1
expect "racecheck gets its share of the host workers" bash -c \
  "grep '^racecheck|' '$log' | grep -qv -- '--racecheck-num-workers $workers' && exit 1 || exit 0"
expect "memcheck checks leaks" bash -c "grep '^memcheck|' '$log' | grep -qv -- '--leak-check full' && exit 1 || exit 0"
expect "the deliberate out-of-memory case hides its API error" bash -c \
  "grep 'an impossible allocation' '$log' | grep -qv -- '--report-api-errors no' && exit 1 || exit 0"
expect "the first runs are racecheck of the slow cases" bash -c \
  "head -n 2 '$log' | grep -c '^racecheck|.*\\(model_transformer\\|dsa_validate\\|ops_dense\\|ops_sparse_mha_attention\\)' | grep -qx 2"
expect "the summary counts every kind" bash -c \
  "grep '^step sanitize: ' '$report' | grep '1 FAILED' | grep '3 SKIPPED' | grep '4 TIMEOUT' | grep -q ' ok'"

# ---- a deadline: the runs it cuts are NOT RUN -------------------------------------------------
FAKE_LOG="$work/log2" FAKE_SLOW='.' \
  "$root/tools/gpu_check.sh" --no-configure --build "$build" --steps sanitize --jobs 2 --sanitize-jobs 2 \
  --sanitize-timeout 2 --sanitize-deadline 1 --sanitize-tools racecheck,memcheck --sanitize-only 'ops_dense#10|ops_sparse_mha_attention#02' \
  "$work/out2" > "$work/out2.txt" 2>&1
report="$work/out2/report.txt"
expect "the two runs started before the deadline time out" test "$(grep -c ': TIMEOUT after 2 s' "$report")" = 2
expect "the two after it are NOT RUN" test "$(grep -c ': NOT RUN (--sanitize-deadline 1 s passed)' "$report")" = 2

if ((failures > 0)); then
  echo "$failures check(s) failed; gpu_check's output:"
  cat "$work/out1.txt" "$work/out2.txt"
  exit 1
fi
echo "all checks passed"
