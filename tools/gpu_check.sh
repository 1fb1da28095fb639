#!/usr/bin/env bash
# One command for a borrowed GPU: build every CUDA target (or reuse the build), run every CUDA test,
# dsa_validate --backend cuda on the golden primitives and the tiny model (with --cuda-kernels
# exact, the default, and fast), the CUDA benchmarks with their report (exact and
# fast rows), the Python package's tests on the GPU, and with --sanitize every CUDA test under compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck). docs/cuda.md, "On a GPU machine".
#
#   tools/gpu_check.sh [options] OUTDIR
#
#   --deps DIR         dependencies staged by `cmake -P cmake/stage_deps.cmake DIR` (default: .deps
#                      if it exists; otherwise the system's)
#   --build DIR        build folder (default build/gpu-check); an existing build is reused
#   --arch LIST        CMAKE_CUDA_ARCHITECTURES (default: the GPU's compute capability, else 90;80)
#   --jobs N           build parallelism (default: nproc)
#   --steps LIST       comma-separated subset of: build,test,validate,bench,python,sanitize
#                      (default: build,test,validate,bench,python; --sanitize adds sanitize)
#   --sanitize         also run the CUDA tests under compute-sanitizer's four tools
#   --sanitize-timeout S   per (tool, run) limit in seconds (default 300); a timeout is reported
#   --sanitize-tools LIST  subset of racecheck,memcheck,initcheck,synccheck (default: all four)
#   --sanitize-only RE     only the runs whose name matches RE (validate_primitives,
#                      validate_tiny_model, the test names: ops_topk, model_transformer, ..., or
#                      a test case by its label "exe#NN name", NN its number in report.txt's
#                      sanitize_TOOL_exe.NN: 'ops_dense#.*65535', '^model_transformer#03 ')
#   --sanitize-jobs N  sanitizer runs at once, sharing the one GPU (default: --jobs)
#   --sanitize-per-exe one sanitizer run per test executable instead of one per test case
#   --sanitize-deadline S  start no run after S seconds of the step (runs are listed NOT RUN):
#                      bounds the step by S + --sanitize-timeout on a loan of fixed length
#   --sanitize-print-limit N  reports printed per run (the sanitizer's default: 100); a run
#                      with reports left unprinted is not counted as passed
#   --test-timeout S   per ctest entry limit in seconds (default 600)
#   --configure-only   stage check + configure, then stop (what CI runs: no GPU needed)
#   --no-configure     use --build as it is configured (a preset's build, say): no cmake run
#   --hide-system-prefixes  configure with /usr and /usr/local ignored by every find_package
#                      (CMAKE_IGNORE_PREFIX_PATH), as on a machine without the -dev packages: CI
#                      proves with it that --deps alone is enough
#
# OUTDIR receives report.txt (one line per step: ok / FAILED / SKIPPED, seconds, log), logs/,
# ctest-junit.xml, bench/*.json and bench/report.md. Exit status: 0 when every step that ran
# passed, 1 when one failed, 2 on a usage error, 3 when no GPU is present (after configure).
set -uo pipefail

# The usage text is the comment block above, up to its first non-comment line.
usage() { sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
deps="" build="$root/build/gpu-check" arch="" jobs="$(nproc 2>/dev/null || echo 2)"
steps="build,test,validate,bench,python" sanitize=0 san_timeout=300 san_tools="racecheck,memcheck,initcheck,synccheck" san_only="" san_jobs="" san_per_exe=0 san_deadline=0 san_print_limit="" test_timeout=600 configure_only=0 no_configure=0 hide_system=0 out=""
while (($#)); do
  case "$1" in
    --deps) deps="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --sanitize-timeout) san_timeout="$2"; shift 2 ;;
    --sanitize-tools) san_tools="$2"; shift 2 ;;
    --sanitize-only) san_only="$2"; shift 2 ;;
    --sanitize-jobs) san_jobs="$2"; shift 2 ;;
    --sanitize-per-exe) san_per_exe=1; shift ;;
    --sanitize-deadline) san_deadline="$2"; shift 2 ;;
    --sanitize-print-limit) san_print_limit="$2"; shift 2 ;;
    --test-timeout) test_timeout="$2"; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    --no-configure) no_configure=1; shift ;;
    --hide-system-prefixes) hide_system=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu_check: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || { echo "gpu_check: one OUTDIR only" >&2; usage; }; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || usage
[ -n "$san_jobs" ] || san_jobs="$jobs"
[[ "$san_deadline" =~ ^[0-9]+$ ]] || { echo "gpu_check: --sanitize-deadline wants seconds, got '$san_deadline'" >&2; exit 2; }
[[ -z "$san_print_limit" || "$san_print_limit" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --sanitize-print-limit wants a positive count, got '$san_print_limit'" >&2; exit 2; }
[[ "$san_jobs" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --sanitize-jobs wants a positive count, got '$san_jobs'" >&2; exit 2; }
((sanitize)) && steps="$steps,sanitize"
mkdir -p "$out/logs" "$out/bench" || exit 2
out="$(cd "$out" && pwd)"
report="$out/report.txt"
: > "$report"
failed=0

note() { echo "$*" | tee -a "$report"; }
has_step() { [[ ",$steps," == *",$1,"* ]]; }
# run_step NAME CMD...: runs CMD with its output in logs/NAME.log, one report line.
run_step() {
  local name="$1"; shift
  local log="$out/logs/$name.log" start=$SECONDS rc
  echo "== $name: $*" >&2
  "$@" > "$log" 2>&1; rc=$?
  if ((rc == 0)); then
    note "step $name: ok ($((SECONDS - start)) s) logs/$name.log"
  else
    note "step $name: FAILED (exit $rc, $((SECONDS - start)) s) logs/$name.log"
    tail -n 30 "$log" | sed 's/^/    /' | tee -a "$report" >&2
    failed=1
  fi
  return $rc
}

if [ -z "$deps" ] && [ -d "$root/.deps" ]; then deps="$root/.deps"; fi
[ -z "$deps" ] || deps="$(cd "$deps" && pwd)" || { echo "gpu_check: --deps folder missing" >&2; exit 2; }
export PATH="$PATH:/usr/local/cuda/bin"

gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
fi
if [ -z "$arch" ]; then
  cap="$(echo "$gpu" | awk -F', ' '{print $2}')"
  if [[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]]; then arch="${cap/./}"; else arch="90;80"; fi
fi

note "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo '+dirty')"
note "gpu: ${gpu:-none found (nvidia-smi)}"
note "nvcc: $(nvcc --version 2>/dev/null | tail -n 2 | head -n 1 || echo 'not found')"
note "cmake: $(cmake --version | head -n 1); host compiler: $(c++ --version 2>/dev/null | head -n 1); cpus: $jobs"
note "deps: ${deps:-system}; build: $build; CUDA architectures: $arch"

# The CUDA benchmarks need Google Benchmark: staged, or (without --deps) installed.
bench=OFF
if [ -n "$deps" ]; then
  [ -n "$(find "$deps" -name 'benchmarkConfig.cmake' -print -quit)" ] && bench=ON
else
  [ -n "$(find /usr/lib /usr/local/lib /usr/lib64 -name 'benchmarkConfig.cmake' -print -quit 2>/dev/null)" ] && bench=ON
fi

configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DDSA_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" "-DDSA_BUILD_BENCH=$bench"
  -DDSA_BUILD_EXAMPLES=OFF -DDSA_TEST_AVX512=OFF -DDSA_INSTALL=OFF -DDSA_WERROR=OFF)
[ -z "$deps" ] || configure+=("-DCMAKE_PREFIX_PATH=$deps")
((hide_system)) && configure+=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local")
if ((no_configure)); then
  [ -f "$build/CMakeCache.txt" ] || { echo "gpu_check: --no-configure needs a configured --build ($build has no CMakeCache.txt)" >&2; exit 2; }
  note "step configure: SKIPPED (--no-configure: $build as it is)"
else
  run_step configure "${configure[@]}" || { note "result: FAILED at configure"; exit 1; }
fi
if ((configure_only)); then note "result: configured (--configure-only)"; exit 0; fi

if [ -z "$gpu" ]; then
  note "result: no GPU on this machine (nvidia-smi found none); nothing but the configure was run"
  exit 3
fi

if has_step build; then
  targets=(dsa_cuda_all dsa_validate)
  run_step build cmake --build "$build" -j "$jobs" --target "${targets[@]}" \
    || { note "result: FAILED at build"; exit 1; }
fi

if has_step test; then
  # Every CUDA test and the two golden replays (label cuda), one at a time: several device
  # tests in parallel would share the GPU and blur which one failed or ran out of memory.
  run_step test ctest --test-dir "$build" -L '^cuda$|;cuda;|^cuda;|;cuda$' -LE cuda_bench \
    --output-on-failure --timeout "$test_timeout" --output-junit "$out/ctest-junit.xml"
fi

if has_step validate; then
  # The exact kernels (the default) and the fast ones: both must pass the golden criteria.
  run_step validate_primitives "$build/tools/dsa_validate" "$root/tests/data/primitives.safetensors" --backend cuda
  run_step validate_tiny_model "$build/tools/dsa_validate" --model "$root/tests/data/tiny-dsv32" --backend cuda
  run_step validate_primitives_fast "$build/tools/dsa_validate" "$root/tests/data/primitives.safetensors" \
    --backend cuda --cuda-kernels fast
  run_step validate_tiny_model_fast "$build/tools/dsa_validate" --model "$root/tests/data/tiny-dsv32" --backend cuda \
    --cuda-kernels fast
fi

if has_step bench; then
  if [ "$bench" = ON ]; then
    for exe in "$build"/bench/cuda/dsa_bench_cuda_*; do
      [ -x "$exe" ] || continue
      stem="$(basename "$exe")"; stem="${stem#dsa_}"
      run_step "$stem" "$exe" "--benchmark_out=$out/bench/$stem.json" --benchmark_out_format=json \
        --benchmark_counters_tabular=true
    done
    if command -v python3 >/dev/null 2>&1; then
      run_step bench_report sh -c "python3 '$root/tools/bench_report_cuda.py' '$out/bench' > '$out/bench/report.md'"
    else
      note "step bench_report: SKIPPED (no python3)"
    fi
  else
    note "step bench: SKIPPED (Google Benchmark not staged: cmake -P cmake/stage_deps.cmake DIR)"
  fi
fi

if has_step python; then
  # The Python package with its CUDA paths, then its whole pytest suite (docs/records/
  # 2026-11-26-gpu-run-2.md): the CUDA tensors, the torch custom ops' CUDA-graph capture and
  # dsa.parallel on the GPU run only here. Needs python3 with torch, nanobind and
  # scikit-build-core (the GPU machines have them; there is no network to pip from).
  if python3 -c 'import torch, nanobind, scikit_build_core' >/dev/null 2>&1; then
    site="$build/python-site"
    rm -rf "$site"
    pip_args=(--no-build-isolation --no-deps --target "$site" -Ccmake.define.DSA_ENABLE_CUDA=ON
      "-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=$arch" "-Cbuild-dir=$build/python-build")
    [ -z "$deps" ] || pip_args+=("-Ccmake.define.CMAKE_PREFIX_PATH=$deps")
    run_step python_build python3 -m pip install "${pip_args[@]}" "$root" \
      && run_step python_tests env PYTHONPATH="$site" DSA_EXPECT_CUDA_BUILD=1 \
        python3 -m pytest -q -p no:cacheprovider -rs "$root/tests/python"
  else
    note "step python: SKIPPED (python3 lacks torch, nanobind or scikit-build-core)"
  fi
fi

if has_step sanitize; then
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    note "step sanitize: FAILED (compute-sanitizer not on PATH)"; failed=1
  else
    # The runs: the golden replays (every kernel on small shapes, quick even under the sanitizer),
    # then every CUDA test executable, one run per doctest test case (--sanitize-per-exe: one
    # per executable). Per-case runs spread the slow executables over the pool and name the case
    # a hazard or a timeout belongs to. Cases named "(no GPU needed)" make no CUDA call (front-end
    # checks only), which the sanitizer reports as an error of its own; ops_frontend holds only
    # such checks.
    # initcheck does not see some of cuBLAS's stores on sm_90 (whole GEMM outputs, split-K
    # partials): reads of them, by cuBLAS's splitKreduce, by dsa's kernels or by a cudaMemcpy,
    # are reported as uninitialized. --check-bulk-copy (on by default) does not change that
    # (docs/records/2026-11-26-gpu-run-4.md). So under initcheck dsa::linear runs on dsa's
    # SIMT kernel (cuda_linear_path::simt; san_run).
    run_label=() run_cmd=()
    add_run() { run_label+=("$1"); local q; printf -v q '%q ' "${@:2}"; run_cmd+=("$q"); }
    add_run validate_primitives "$build/tools/dsa_validate" "$root/tests/data/primitives.safetensors" --backend cuda
    add_run validate_tiny_model "$build/tools/dsa_validate" --model "$root/tests/data/tiny-dsv32" --backend cuda
    for exe in "$build"/tests/cuda/dsa_test_cuda_*; do
      [ -x "$exe" ] || continue
      name="$(basename "$exe" | sed 's/^dsa_test_cuda_//')"
      [ "$name" != ops_frontend ] || continue
      if ((san_per_exe)); then add_run "$name" "$exe"; continue; fi
      k=0
      # doctest lists one name per line between two rules of '='; in its --test-case filter a
      # comma separates patterns and a backslash escapes, so both are escaped.
      while IFS= read -r tc; do
        k=$((k + 1))
        [[ "$tc" == *"(no GPU needed)"* ]] && continue
        filter="${tc//\\/\\\\}"; filter="${filter//,/\\,}"
        add_run "$name#$(printf %02d "$k") $tc" "$exe" "--test-case=$filter"
      done < <("$exe" --list-test-cases 2>/dev/null | sed -n '/^=\{10,\}$/,/^=\{10,\}$/p' | grep -v '^=\{10,\}$')
    done

    # Run I's id in file names ("ops_dense#05 <case>" -> ops_dense.05), and the file holding its
    # report line for TOOL (printed in a fixed order once the pool drains).
    run_id() { local rawid="${run_label[$1]%% *}"; echo "${rawid//#/.}"; }
    result_file() { echo "$out/logs/.result.$1.$(printf %04d "$2")"; }

    # san_run TOOL I: one sanitizer run, its log in logs/, its report line in result_file.
    san_run() {
      local tool="$1" i="$2" label="${run_label[$2]}" id log start rc lines nocall in_cublas hazards unprinted aside result res extra=()
      local -a cmd
      eval "cmd=(${run_cmd[$i]})"
      id="$(run_id "$i")" res="$(result_file "$tool" "$i")"
      log="$out/logs/sanitize_${tool}_${id}.log" start=$SECONDS
      [ "$tool" = memcheck ] && extra+=(--leak-check full)
      # racecheck analyses on host worker threads whose number it picks itself; with san_jobs runs
      # at once, each gets its share of the cores (--racecheck-num-workers).
      [ "$tool" = racecheck ] && extra+=(--racecheck-num-workers "$race_workers")
      [ -n "$san_print_limit" ] && extra+=(--print-limit "$san_print_limit")
      # The memory test asks for 2^60 bytes on purpose: its failing cudaMalloc is not a finding.
      [[ "$label" == memory* ]] && extra+=(--report-api-errors no)
      # Under initcheck the model replay runs dsa::linear on dsa's SIMT kernel, as the tests do
      # (linear_path_for_tests(); cuBLAS's blind spot above); the other tools check cuBLAS too.
      [ "$tool" = initcheck ] && [ "$label" = validate_tiny_model ] && cmd+=(--cuda-linear simt)
      # DSA_TEST_UNDER_SANITIZER=TOOL: the V3.2-sized test cases run smaller shapes with the same
      # code paths (tests/cuda/cuda_test.hpp, under_sanitizer()); the test step ran the full ones.
      DSA_TEST_UNDER_SANITIZER="$tool" timeout "$san_timeout" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 "${cmd[@]}" > "$log" 2>&1
      rc=$?
      # compute-sanitizer reports each hazard as a "========= <kind>" block; its banner and
      # summary lines are not hazards. Those inside cuBLAS's own kernels (nvjet, xmma, cutlass,
      # splitKreduce) are counted apart: racecheck reports the sm_90 GEMMs' asynchronous
      # (TMA / mbarrier) shared-memory traffic as races, and they are not dsa's code to fix
      # (docs/records/2026-11-26-gpu-run-2.md). Excluding those kernels from instrumentation
      # (--kernel-name-exclude) is no way out: the sanitizer then fails inside them.
      # One line per report: its header, with the "at <kernel>" line that follows it where the
      # header does not name the kernel (memcheck, initcheck).
      lines="$(awk '/^========= [A-Z]/ { if (h != "") print h; h = $0; next }
                    /^=========     at / && h != "" { print h " " $0; h = ""; next }
                    END { if (h != "") print h }' "$log" |
               grep -vE 'COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Program hit|Target application returned')"
      in_cublas="$(grep -cE 'nvjet_|xmma|cutlass|splitKreduce' <<< "$lines")"
      hazards=$(( $(grep -c . <<< "$lines") - in_cublas ))
      aside=""
      ((in_cublas > 0)) && aside=", $in_cublas more inside cuBLAS's kernels (not counted)"
      # Past the print limit the sanitizer only counts: reports it did not print may be dsa's.
      unprinted="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors were not printed.*/\1/p' "$log" | tail -n 1)"
      unprinted="${unprinted:-0}"
      # A test case that turned out to make no CUDA call: the sanitizer says so as an error.
      nocall="$(grep -c 'instrumented API call' <<< "$lines")"
      if ((rc != 124)) && ((nocall > 0)) && ((hazards == nocall)) && grep -q 'Status: SUCCESS' "$log"; then
        result="ok ($((SECONDS - start)) s, the case made no CUDA call)"
      elif ((unprinted > 0)); then
        result="FAILED ($hazards reports$aside; $unprinted more not printed: raise --sanitize-print-limit)"
      elif ((rc == 124)); then
        if ((hazards == 0)); then
          result="TIMEOUT after ${san_timeout} s, no hazard reported before it$aside"
        else
          result="FAILED ($hazards reports before the ${san_timeout} s timeout$aside)"
        fi
      elif ((rc == 0)) || { ((rc == 99)) && ((hazards == 0)) && ((in_cublas > 0)); }; then
        result="ok ($((SECONDS - start)) s$aside)"
      else
        result="FAILED (exit $rc, $hazards reports, $((SECONDS - start)) s)"
      fi
      {
        echo "step sanitize_${tool}_${id}: $result logs/$(basename "$log")${label#"${label%% *}"}"
        [[ "$result" == FAILED* ]] && grep -m 12 -E '^=========' "$log" | sed 's/^/    /'
      } > "$res"
      head -n 1 "$res" >&2
    }

    IFS=, read -r -a tools <<< "$san_tools"
    race_workers=$(( $(nproc 2>/dev/null || echo 2) / san_jobs )); ((race_workers >= 1)) || race_workers=1
    rm -f "$out"/logs/.result.*
    san_start=$SECONDS
    echo "== sanitize: ${#run_label[@]} runs per tool, $san_jobs at a time" >&2
    # The slowest runs start first (racecheck first of all), so that they overlap the many short
    # ones instead of finishing alone at the end.
    race_skip='^(validate_tiny_model$|model_transformer#[0-9]+ (tiny-dsv32|CUDA forward is deterministic))'
    # The slow ones by test-case name, like race_skip (case numbers move when cases are added).
    heavy='^(model_transformer#|validate_tiny_model$|ops_sparse_mla_attention#[0-9]+ .*(V3.2|prefill-like|run to run)|ops_dense#[0-9]+ .*linear|ops_sparse_mha_attention#|ops_hadamard#[0-9]+ .*(every size|rotate_activation)|ops_lightning_indexer#[0-9]+ .*(V3.2 shapes|backward: bit-identical))'
    order=()
    for pass in heavy rest; do
      for tool in "${tools[@]}"; do
        for i in "${!run_label[@]}"; do
          if [[ "${run_label[$i]}" =~ $heavy ]]; then [ "$pass" = heavy ] || continue; else [ "$pass" = rest ] || continue; fi
          order+=("$tool $i")
        done
      done
    done
    for entry in "${order[@]}"; do
      tool="${entry% *}" i="${entry#* }"
      label="${run_label[$i]}"
      [[ "${label%%[# ]*}" =~ $san_only || "$label" =~ $san_only ]] || continue
      # racecheck looks for shared-memory hazards inside each kernel launch, which depend on the
      # kernel and its launch shape, not on the program around it: of the forward-pass runs it
      # takes the tiny-random case (FP8, chunked prefill and decode) and the BF16-checkpoint case,
      # whose kernels are those of the others; the golden replay (88 tokens), the tiny-dsv32 case
      # and the determinism case (a dozen forward calls) would each take it many minutes.
      # memcheck, initcheck and synccheck run them all.
      if [ "$tool" = racecheck ] && [[ "$label" =~ $race_skip ]]; then
        echo "step sanitize_${tool}_$(run_id "$i"): SKIPPED (racecheck runs the same kernels in the tiny-random and BF16 model cases)${label#"${label%% *}"}" \
          > "$(result_file "$tool" "$i")"
        continue
      fi
      while (($(jobs -rp | wc -l) >= san_jobs)); do wait -n; done
      if ((san_deadline > 0 && SECONDS - san_start >= san_deadline)); then
        echo "step sanitize_${tool}_$(run_id "$i"): NOT RUN (--sanitize-deadline ${san_deadline} s passed)" \
          > "$(result_file "$tool" "$i")"
        continue
      fi
      san_run "$tool" "$i" &
    done
    wait
    for f in "$out"/logs/.result.*; do
      [ -e "$f" ] || continue
      cat "$f" >> "$report"
      grep -q '^step [^ ]*: FAILED' "$f" && failed=1
    done
    summary="$(grep -hoE '^step sanitize_[^ ]*: [A-Za-z]+' "$out"/logs/.result.* 2>/dev/null | awk '{print ($3 == "NOT" ? "NOT-RUN" : $3)}' | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')"
    rm -f "$out"/logs/.result.*
    note "step sanitize: ${summary:-no run matched}"
  fi
fi

if ((failed)); then note "result: FAILED (see the FAILED steps above)"; exit 1; fi
note "result: ok"
