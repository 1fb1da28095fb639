#!/usr/bin/env bash
# dsa vs llama.cpp on the same DeepSeek-V3.2 checkpoint, in one run (issue #13, item 4).
#
#   bench/compare_llamacpp.sh [--contexts "1024 8192 32768"] [--threads "2"] [--n-gen 32]
#                             [--parallel "1 4 8 16"]
#                             [--reps 1] [--model DIR] [--outtype q8_0|bf16|f16|f32]
#                             [--llama-cpp-python-version X.Y.Z] [--dsa-ref REF | --dsa-run PATH]
#                             [--dsa-fp8-dot exact|fp32] [--isa native|x86-64-v3]
#                             [--timeout S] [--nice N] [--max-busy F] [--max-wait S]
#                             [--llama-tool llama-batched-bench|llama-bench]
#                             [--publish] [--report-only]
#
# On a fresh machine (Debian 12 with the project's build prerequisites, Python >= 3.10 with
# venv, PyPI reachable) it
#   1. downloads the llama-cpp-python source distribution from PyPI
#      (pip download --no-binary :all: --no-deps llama-cpp-python), unpacks it and checks that
#      its vendored llama.cpp (vendor/llama.cpp) knows DeepseekV32ForCausalLM;
#   2. builds only llama-batched-bench and llama-bench from it (Release, -DGGML_NATIVE=ON,
#      no CURL/OpenSSL; with --isa x86-64-v3 GGML_NATIVE=OFF and AVX, AVX2, FMA, F16C, BMI2 on,
#      llama.cpp's AVX2 build, in a build directory of its own);
#   3. builds dsa_run and dsa_make_tiny_model (Release, DSA_NATIVE=ON; with --isa x86-64-v3
#      -march=x86-64-v3 and DSA_CPU_DISPATCH=OFF, so that an AVX-512 host runs the AVX2 kernels
#      of both engines) from this checkout's
#      working tree, or with --dsa-ref REF from `git archive REF` (a commit, unaffected by edits
#      in progress), unless --dsa-run names a binary; --dsa-fp8-dot picks dsa_run's FP8 block
#      dot (exact, its default, or the fast fp32 one);
#   4. makes a Python venv with what llama.cpp's convert_hf_to_gguf.py imports (torch, numpy,
#      transformers, at the versions the vendored requirements pin; torch from PyPI brings
#      its CUDA wheels, about 4.7 GB installed, unused) and matplotlib for the plot;
#   5. picks the checkpoint: --model, else models/tiny-random when every context + decode
#      fits its max_position_embeddings (8192), else the same weights written by
#      `dsa_make_tiny_model DIR --seed 1 --max-position 163840` (only that field differs);
#   6. converts it with llama.cpp's own converter through bench/llamacpp_convert.py, which only
#      replaces the tokenizer step (our checkpoints have none) by the converter's "no vocab"
#      stub; FP8 weights are dequantized by the converter and stored as Q8_0 (--fp8-as-q8) by
#      default, the closest to dsa's one byte per weight;
#   7. times both engines (bench/compare_llamacpp.py): prefill and decode tokens/s at each
#      context and thread count, llama.cpp with and without flash attention. dsa_run and
#      llama-batched-bench (-npp L -ntg N -npl 1) run the same sequence: a prefill of L tokens,
#      then N decode steps; --llama-tool llama-bench uses llama-bench -p L / -n N -d L instead
#      (its -d prefill is untimed but costs as much again). --parallel "1 4 8 16" runs B
#      sequences at once for each B, each with its own prompt of L tokens: dsa_run --batch B
#      against llama-batched-bench -npl B (aggregate tokens/s of both). It prints one table
#      and writes $OUT/results.json and $OUT/compare_llamacpp.png (results-x86-64-v3.json and
#      compare_llamacpp-x86-64-v3.png with --isa x86-64-v3; --publish also copies them to
#      docs/img/). Before each timed process it waits up to
#      --max-wait s (300) until at most --max-busy (0.3) of the CPUs are busy; --nice N runs
#      both engines under nice -n N, each in a session of its own with autogroup nice N
#      (N < 0 as root: less disturbance on a shared machine; with autogroup scheduling a plain
#      nice does not rank a process against other sessions' builds).
#
# Everything downloaded or built goes under $OUT (default build/compare-llamacpp, git-ignored);
# a second run reuses what is there. Not part of CI: the first run installs torch with its CUDA
# wheels (4.7 GB) and builds for 10-20 minutes on 2 cores. docs/performance.md, "dsa vs
# llama.cpp", has the figures and what they mean. Environment: OUT, JOBS (build jobs, default
# nproc), NICE (niceness of builds and installs, default 10), PYTHON (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/build/compare-llamacpp}"
JOBS="${JOBS:-$(nproc)}"
NICE="${NICE:-10}"
PYTHON="${PYTHON:-python3}"

CONTEXTS="1024 8192 32768"
THREADS="$(nproc)"
N_GEN=32
REPS=1
MODEL=""
OUTTYPE="q8_0"
LCP_VERSION=""
DSA_RUN=""
DSA_REF=""
TIMEOUT=""
NICE_RUN=""
MAX_BUSY=""
MAX_WAIT=""
LLAMA_TOOL="llama-batched-bench"
DSA_FP8_DOT="exact"
PARALLEL="1"
ISA="native"
PUBLISH=0
REPORT_ONLY=0

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) CONTEXTS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --n-gen) N_GEN="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --model) MODEL="$(cd "$2" && pwd)"; shift 2 ;;
    --outtype) OUTTYPE="$2"; shift 2 ;;
    --llama-cpp-python-version) LCP_VERSION="$2"; shift 2 ;;
    --dsa-run) DSA_RUN="$(realpath "$2")"; shift 2 ;;
    --dsa-ref) DSA_REF="$2"; shift 2 ;;
    --dsa-fp8-dot) DSA_FP8_DOT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --nice) NICE_RUN="$2"; shift 2 ;;
    --max-busy) MAX_BUSY="$2"; shift 2 ;;
    --max-wait) MAX_WAIT="$2"; shift 2 ;;
    --llama-tool) LLAMA_TOOL="$2"; shift 2 ;;
    --isa) ISA="$2"; shift 2 ;;
    --publish) PUBLISH=1; shift ;;
    --report-only) REPORT_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done

case "$ISA" in
  native) ISA_SUFFIX=""; LLAMA_ISA_FLAGS=(-DGGML_NATIVE=ON); DSA_ISA_FLAGS=(-DDSA_NATIVE=ON) ;;
  x86-64-v3)
    ISA_SUFFIX="-x86-64-v3"
    LLAMA_ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
    DSA_ISA_FLAGS=(-DDSA_NATIVE=OFF -DDSA_CPU_DISPATCH=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3) ;;
  *) echo "--isa $ISA: expected native or x86-64-v3" >&2; exit 2 ;;
esac
RESULTS="results$ISA_SUFFIX.json"
PLOT="compare_llamacpp$ISA_SUFFIX.png"

say() { printf '\n=== %s\n' "$*" >&2; }
die() { printf 'compare_llamacpp: %s\n' "$*" >&2; exit 1; }
quiet_nice() { nice -n "$NICE" "$@"; }

mkdir -p "$OUT"/{dl,src,models,logs}
VENV="$OUT/venv"
VPY="$VENV/bin/python"

if [[ $REPORT_ONLY == 1 ]]; then
  [[ -f "$OUT/$RESULTS" ]] || die "no $OUT/$RESULTS yet"
  py="$PYTHON"; [[ -x "$VPY" ]] && py="$VPY"
  exec "$py" "$ROOT/bench/compare_llamacpp.py" --report "$OUT/$RESULTS" --plot "$OUT/$PLOT"
fi

for tool in cmake "$PYTHON" tar nice; do command -v "$tool" >/dev/null || die "needs $tool"; done
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)

# --- 1. llama-cpp-python sdist -> vendored llama.cpp ------------------------------------------
say "1/7 llama-cpp-python source distribution"
if [[ ! -x "$VPY" ]]; then
  "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
fi
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
spec="llama-cpp-python${LCP_VERSION:+==$LCP_VERSION}"
sdist="$(ls -t "$OUT"/dl/llama_cpp_python-${LCP_VERSION:-*}.tar.gz 2>/dev/null | head -n1 || true)"
if [[ -z "$sdist" ]]; then
  # --no-binary :all: makes pip fetch the sdist; it also prepares its metadata, which builds the
  # build backend (scikit-build-core) from source: about half a minute.
  quiet_nice "$VPY" -m pip download --no-binary :all: --no-deps -d "$OUT/dl" "$spec" >&2
  sdist="$(ls -t "$OUT"/dl/llama_cpp_python-*.tar.gz | head -n1)"
fi
LCP_VER="$(basename "$sdist" .tar.gz)"; LCP_VER="${LCP_VER#llama_cpp_python-}"
SRC="$OUT/src/llama_cpp_python-$LCP_VER"
if [[ ! -d "$SRC/vendor/llama.cpp/src" ]]; then tar -xzf "$sdist" -C "$OUT/src"; fi
LLAMA="$SRC/vendor/llama.cpp"
[[ -f "$LLAMA/convert_hf_to_gguf.py" ]] || die "$sdist has no vendor/llama.cpp/convert_hf_to_gguf.py"
if ! grep -rqs 'DeepseekV32ForCausalLM' "$LLAMA/convert_hf_to_gguf.py" "$LLAMA/conversion" ||
   ! grep -qs '"deepseek32"' "$LLAMA/src/llama-arch.cpp"; then
  die "llama-cpp-python $LCP_VER vendors a llama.cpp without DeepseekV32ForCausalLM (llama.cpp PR #23346);
  pick a newer one with --llama-cpp-python-version (pip index versions llama-cpp-python)"
fi
echo "llama-cpp-python $LCP_VER: $LLAMA" >&2

# --- 2. llama.cpp's benchmarks ---------------------------------------------------------------
say "2/7 llama-batched-bench and llama-bench (Release, ${LLAMA_ISA_FLAGS[*]})"
LBUILD="$OUT/llama-build-$LCP_VER$ISA_SUFFIX"
LLAMA_BENCH="$LBUILD/bin/llama-bench"
LLAMA_BATCHED_BENCH="$LBUILD/bin/llama-batched-bench"
if [[ ! -x "$LLAMA_BENCH" || ! -x "$LLAMA_BATCHED_BENCH" ]]; then
  if [[ ! -f "$LBUILD/CMakeCache.txt" ]]; then
    quiet_nice cmake -S "$LLAMA" -B "$LBUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${LLAMA_ISA_FLAGS[@]}" \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >"$OUT/logs/llama-cmake.log" 2>&1 ||
      { tail -n 30 "$OUT/logs/llama-cmake.log" >&2; die "configuring llama.cpp failed"; }
  fi
  quiet_nice cmake --build "$LBUILD" --target llama-batched-bench llama-bench -j "$JOBS" \
    >"$OUT/logs/llama-build.log" 2>&1 ||
    { tail -n 30 "$OUT/logs/llama-build.log" >&2; die "building llama.cpp's benchmarks failed"; }
fi
LLAMA_COMMIT="$("$LLAMA_BATCHED_BENCH" --version 2>&1 | grep -o 'commit [0-9a-f]*' | head -n1 || true)"
echo "$LLAMA_BATCHED_BENCH, $LLAMA_BENCH (llama.cpp ${LLAMA_COMMIT:-commit unknown})" >&2

# --- 3. dsa_run -------------------------------------------------------------------------------
say "3/7 dsa_run and dsa_make_tiny_model"
DSRC="$ROOT"
DBUILD="$OUT/dsa-build$ISA_SUFFIX"
DSA_DESC="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$DSA_REF" ]]; then
  sha="$(git -C "$ROOT" rev-parse --short "$DSA_REF^{commit}")" || die "--dsa-ref $DSA_REF: no such commit"
  DSRC="$OUT/dsa-src-$sha"
  DBUILD="$OUT/dsa-build-$sha$ISA_SUFFIX"
  DSA_DESC="$sha ($DSA_REF)"
  if [[ ! -f "$DSRC/CMakeLists.txt" ]]; then
    rm -rf "$DSRC.tmp" && mkdir -p "$DSRC.tmp"
    git -C "$ROOT" archive "$sha" | tar -x -C "$DSRC.tmp" && mv "$DSRC.tmp" "$DSRC"
  fi
elif ! git -C "$ROOT" diff --quiet HEAD -- include tools cmake CMakeLists.txt 2>/dev/null; then
  DSA_DESC="$DSA_DESC + uncommitted changes"
fi
MAKE_MODEL="$DBUILD/tools/dsa_make_tiny_model"
if [[ -z "$DSA_RUN" ]]; then
  DSA_RUN="$DBUILD/tools/dsa_run"
  quiet_nice cmake -S "$DSRC" -B "$DBUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${DSA_ISA_FLAGS[@]}" \
    -DDSA_BUILD_TESTS=OFF -DDSA_BUILD_EXAMPLES=OFF -DDSA_BUILD_BENCH=OFF -DDSA_INSTALL=OFF \
    -DDSA_WERROR=OFF >"$OUT/logs/dsa-cmake.log" 2>&1 ||
    { tail -n 30 "$OUT/logs/dsa-cmake.log" >&2; die "configuring dsa failed"; }
  # Always rebuilt (a no-op when nothing changed): the point is to time the current checkout.
  quiet_nice cmake --build "$DBUILD" --target dsa_run dsa_make_tiny_model -j "$JOBS" \
    >"$OUT/logs/dsa-build.log" 2>&1 ||
    { tail -n 30 "$OUT/logs/dsa-build.log" >&2; die "building dsa_run failed"; }
else
  DSA_DESC="$DSA_RUN"
  [[ -x "$(dirname "$DSA_RUN")/dsa_make_tiny_model" ]] && MAKE_MODEL="$(dirname "$DSA_RUN")/dsa_make_tiny_model"
fi
[[ -x "$DSA_RUN" ]] || die "no dsa_run at $DSA_RUN"
echo "$DSA_RUN" >&2

# --- 4. Python environment for convert_hf_to_gguf.py -------------------------------------------
say "4/7 Python venv for convert_hf_to_gguf.py ($VENV)"
# The converter imports torch, numpy and transformers at the top (transformers.AutoConfig; with
# the tokenizer stub no tokenizer is loaded). Pins come from the vendored requirements; their
# --extra-index-url (PyTorch's own CPU index) is not used: only PyPI is assumed reachable.
reqs="$LLAMA/requirements/requirements-convert_legacy_llama.txt $LLAMA/requirements/requirements-convert_hf_to_gguf.txt"
pin() { cat $reqs 2>/dev/null | sed 's/#.*//; s/[[:space:]]//g' | grep -E "^$1([=~<>!]|$)" | tail -n1; }
PKGS=("$(pin torch)" "$(pin numpy)" "$(pin transformers)" "$(pin protobuf)")
for i in "${!PKGS[@]}"; do [[ -n "${PKGS[$i]}" ]] || PKGS[$i]="$(echo torch numpy transformers protobuf | cut -d' ' -f$((i + 1)))"; done
PKGS+=(tqdm pyyaml requests matplotlib)
stamp="$VENV/.compare-llamacpp-$(echo "${PKGS[*]}" | cksum | cut -d' ' -f1)"
if [[ ! -f "$stamp" ]]; then
  if ! "$VPY" -c 'import torch' 2>/dev/null; then
    avail_kb="$(df -Pk "$OUT" | awk 'NR == 2 {print $4}')"
    (( avail_kb > 8 * 1024 * 1024 )) || die "installing torch needs about 8 GB free under $OUT (PyPI's Linux wheel brings CUDA libraries); $((avail_kb / 1024)) MB free"
  fi
  echo "pip install ${PKGS[*]}" >&2
  quiet_nice "$VPY" -m pip install -q "${PKGS[@]}" >&2
  touch "$stamp"
fi

# --- 5. the checkpoint -------------------------------------------------------------------------
say "5/7 checkpoint"
max_ctx=0; for c in ${CONTEXTS//,/ }; do (( c > max_ctx )) && max_ctx=$c; done
need=$(( max_ctx + N_GEN + 1 ))
maxpos() { "$VPY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_position_embeddings"])' "$1/config.json"; }
if [[ -z "$MODEL" ]]; then
  MODEL="$ROOT/models/tiny-random"
  if (( need > $(maxpos "$MODEL") )); then
    p=163840  # DeepSeek-V3.2's own max_position_embeddings (YaRN x40 of 4096)
    (( p >= need )) || p=$need
    MODEL="$OUT/models/tiny-random-maxpos$p"
    if [[ ! -f "$MODEL/model.safetensors" ]]; then
      [[ -x "$MAKE_MODEL" ]] || die "no dsa_make_tiny_model next to $DSA_RUN to write $MODEL"
      # The bundled model is `dsa_make_tiny_model models/tiny-random --seed 1`; the same seed
      # gives the same weights, and --max-position changes only max_position_embeddings.
      "$MAKE_MODEL" "$MODEL" --seed 1 --max-position "$p" >&2
    fi
  fi
fi
(( need <= $(maxpos "$MODEL") )) || die "$MODEL: max_position_embeddings $(maxpos "$MODEL") < context $max_ctx + $((N_GEN + 1))"
echo "$MODEL" >&2

# --- 6. convert with llama.cpp's convert_hf_to_gguf.py ------------------------------------------
say "6/7 convert_hf_to_gguf.py -> GGUF ($OUTTYPE)"
case "$OUTTYPE" in
  q8_0) CONV_ARGS=(--fp8-as-q8) ;;          # FP8 weights -> Q8_0; the rest as the converter picks
  bf16|f16|f32) CONV_ARGS=(--outtype "$OUTTYPE") ;;
  *) die "--outtype: q8_0, bf16, f16 or f32" ;;
esac
GGUF="$OUT/models/$(basename "$MODEL")-$OUTTYPE-llamacpp$LCP_VER.gguf"
if [[ ! -s "$GGUF" || "$MODEL/model.safetensors" -nt "$GGUF" || "$MODEL/config.json" -nt "$GGUF" ]]; then
  rm -f "$GGUF"
  quiet_nice "$VPY" "$ROOT/bench/llamacpp_convert.py" "$LLAMA" "$MODEL" "${CONV_ARGS[@]}" \
    --outfile "$GGUF" >"$OUT/logs/convert.log" 2>&1 ||
    { tail -n 30 "$OUT/logs/convert.log" >&2; die "convert_hf_to_gguf.py failed"; }
fi
echo "$GGUF ($(du -h "$GGUF" | cut -f1))" >&2

# --- 7. timing ---------------------------------------------------------------------------------
say "7/7 timing: contexts {$CONTEXTS}, threads {$THREADS}, batches {$PARALLEL}, $N_GEN decode steps, $REPS rep(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
extra=()
[[ -n "$TIMEOUT" ]] && extra+=(--timeout "$TIMEOUT")
[[ -n "$NICE_RUN" ]] && extra+=(--nice "$NICE_RUN")
[[ -n "$MAX_BUSY" ]] && extra+=(--max-busy "$MAX_BUSY")
[[ -n "$MAX_WAIT" ]] && extra+=(--max-wait "$MAX_WAIT")
"$VPY" "$ROOT/bench/compare_llamacpp.py" \
  --dsa-run "$DSA_RUN" --dsa-fp8-dot "$DSA_FP8_DOT" --llama-bench "$LLAMA_BENCH" --llama-batched-bench "$LLAMA_BATCHED_BENCH" \
  --llama-tool "$LLAMA_TOOL" --model "$MODEL" --gguf "$GGUF" \
  --contexts "$CONTEXTS" --threads "$THREADS" --parallel "$PARALLEL" --n-gen "$N_GEN" --reps "$REPS" "${extra[@]}" \
  --meta "llama_cpp_python_version=$LCP_VER" --meta "llama_cpp_version=${LLAMA_COMMIT:-commit unknown}" \
  --meta "gguf_type=$OUTTYPE" --meta "isa=$ISA" \
  --meta "dsa_version=$DSA_DESC" \
  --json "$OUT/$RESULTS" --plot "$OUT/$PLOT"

if [[ $PUBLISH == 1 ]]; then
  mkdir -p "$ROOT/docs/img"
  cp "$OUT/$RESULTS" "$ROOT/docs/img/compare_llamacpp$ISA_SUFFIX.json"
  [[ -f "$OUT/$PLOT" ]] && cp "$OUT/$PLOT" "$ROOT/docs/img/$PLOT"
  echo "copied to docs/img/compare_llamacpp.{json,png}" >&2
fi
