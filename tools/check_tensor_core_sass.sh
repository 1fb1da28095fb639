#!/usr/bin/env bash
# Checks, without a GPU, that the fast kernels run on the tensor cores: in the sm_90 SASS of the
# given objects or static libraries (dsa_cuda_ops), every instance of the fast kernels
# (sparse_mla_attention_fast_kernel, lightning_indexer_fast_kernel) holds tensor-core instructions
# (HMMA or HGMMA), and both kernels are there. A kernel whose mma was compiled out, or a build
# that lost the fast kernels, fails (docs/cuda.md, "Exact and fast kernels").
#
#   tools/check_tensor_core_sass.sh --tools DIR [--python PY] LIBRARY...
#
# cuobjdump (with the nvdisasm it needs for -sass) is not in every CUDA toolkit install; PyPI's
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry them (they read CUDA 13 cubins).
# When DIR/nvidia/*/bin has no cuobjdump, the wheels are downloaded there with `PY -m pip
# download` (PY: --python, default python3) and unzipped; nothing is installed.
# Exit status: 0 every fast kernel has tensor-core instructions; 1 one has none or a kernel is
# missing; 2 usage or tool errors.
set -uo pipefail

usage() { sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 2; }

tools="" python="python3" libs=()
while (($#)); do
  case "$1" in
    --tools) tools="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "check_tensor_core_sass: unknown option $1" >&2; usage ;;
    *) libs+=("$1"); shift ;;
  esac
done
[ -n "$tools" ] && ((${#libs[@]})) || usage
for lib in "${libs[@]}"; do
  [ -f "$lib" ] || { echo "check_tensor_core_sass: $lib: no such file" >&2; exit 2; }
done

mkdir -p "$tools" || exit 2
find_tool() { find "$tools" -path '*/bin/*' -name "$1" -type f 2>/dev/null | head -n 1; }
cuobjdump="$(find_tool cuobjdump)"
if [ -z "$cuobjdump" ] || [ -z "$(find_tool nvdisasm)" ]; then
  "$python" -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm \
    || { echo "check_tensor_core_sass: pip download of nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm failed" >&2; exit 2; }
  for whl in "$tools"/wheels/*.whl; do
    "$python" -m zipfile -e "$whl" "$tools" || { echo "check_tensor_core_sass: cannot unzip $whl" >&2; exit 2; }
  done
  cuobjdump="$(find_tool cuobjdump)"
fi
nvdisasm="$(find_tool nvdisasm)"
[ -n "$cuobjdump" ] && [ -n "$nvdisasm" ] || { echo "check_tensor_core_sass: no cuobjdump / nvdisasm under $tools" >&2; exit 2; }
chmod +x "$cuobjdump" "$nvdisasm"
echo "check_tensor_core_sass: $("$cuobjdump" --version | tail -n 1)"

failed=0
for lib in "${libs[@]}"; do
  sass="$(PATH="$(dirname "$nvdisasm"):$PATH" "$cuobjdump" -sass -arch sm_90 "$lib" 2>&1)" \
    || { echo "check_tensor_core_sass: cuobjdump -sass -arch sm_90 $lib failed:" >&2; echo "$sass" | tail -n 5 >&2; exit 2; }
  # One line per function: its tensor-core instruction count and its (mangled) name.
  counts="$(awk '/Function : / { if (f != "") print c, f; f = $3; c = 0; next }
                 /[^A-Z](HMMA|HGMMA)\./ { c++ }
                 END { if (f != "") print c, f }' <<< "$sass")"
  for kernel in sparse_mla_attention_fast_kernel lightning_indexer_fast_kernel; do
    found="$(grep -F "$kernel" <<< "$counts")"
    if [ -z "$found" ]; then
      echo "FAILED: $lib: no sm_90 SASS of $kernel"
      failed=1
      continue
    fi
    while read -r n name; do
      if ((n == 0)); then
        echo "FAILED: $lib: $name: no HMMA / HGMMA instruction in its sm_90 SASS"
        failed=1
      else
        echo "ok: $name: $n tensor-core instructions (sm_90)"
      fi
    done <<< "$found"
  done
done
exit $failed
