#!/usr/bin/env bash
# Builds llama-cpp-python for a portable CPU baseline, plus a faster variant that a worker uses
# only once it has proven itself on the run host, and installs both into one Python.
#
#   ops/build-llama.sh PYTHON            # e.g. ops/build-llama.sh .venv/bin/python
#
# llama.cpp's default build is `-march=native`: it uses every instruction set the build
# host's CPUID advertises, AMX and AVX-512 included. Such a build faults on a host whose CPU
# or hypervisor lacks one of them (an Intel Xeon whose hypervisor does not enable the AMX
# tile state dies on its first `ldtilecfg`), and pip's wheel cache hands it to every later
# install on the machine. So the build here names its instruction sets instead:
#
#   DECIDE_CPU_BASELINE=x86-64-v3  AVX2, FMA, F16C, BMI2 (every x86-64 server CPU since
#                                  2015); the default on an x86-64 build host that has them
#   DECIDE_CPU_BASELINE=x86-64     SSE4.2 only; the default where the build host lacks AVX2
#   DECIDE_CPU_BASELINE=generic    the compiler's defaults (any other architecture)
#   DECIDE_CPU_BASELINE=native     the build host's CPU, as llama.cpp does by default: only
#                                  for a host that builds for itself alone
#
# The baseline is what llama-cpp-python loads by default. Beside it, on x86-64, goes the
# variant x86-64-v4 (AVX-512 F/BW/DQ/VL/CD, VBMI and VNNI; never AMX) into
# PREFIX/lib/decide-llama-variants/x86-64-v4: a worker's runner loads it (through llama-cpp-
# python's LLAMA_CPP_LIB_PATH) only where the kernel reports those extensions, and keeps it
# only when it has decoded the start-up probe right in a child process; anything else falls
# back to the baseline (runner/variants.py). DECIDE_CPU_VARIANTS=none builds no variant.
#
# DECIDE_LLAMA_CMAKE_ARGS adds flags of your own; the CPU baseline still applies to the CPU
# code of such a build.
#
# DECIDE_GPU=cuda builds the CUDA variant instead (the GPU image, `make gpu-check`):
# -DGGML_CUDA=on for the GPU architectures DECIDE_CUDA_ARCHITECTURES names (default: the
# compute capability nvidia-smi reports, 90 on an H100 or H200; built as "90-real"), flash
# attention kernels for F16 caches only and no NCCL (a few minutes on 16 cores), no AVX-512
# variant. Its build is named BASELINE+cuda (x86-64-v3+cuda) in every result's x_build.
# LLAMA_CPP_PYTHON_SOURCE names a local sdist to build from (a host without PyPI), and
# DECIDE_PIP_WHEEL_ARGS adds arguments to its `pip wheel` (--no-build-isolation there).
#
# Wheels are cached per version and flags under DECIDE_WHEEL_CACHE (default
# ~/.cache/decide/wheels), never in pip's cache, so a wheel built with other flags is never
# picked up by mistake.
set -euo pipefail

PYTHON=${1:?usage: ops/build-llama.sh PYTHON}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
EXTRA=${DECIDE_LLAMA_CMAKE_ARGS:-}
SOURCE=${LLAMA_CPP_PYTHON_SOURCE:-llama-cpp-python==$VERSION}
MARK=
if [ "${DECIDE_GPU:-}" = cuda ]; then
    ARCHS=${DECIDE_CUDA_ARCHITECTURES:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
                                         2>/dev/null | head -n 1 | tr -d ' .')}
    if [ -z "$ARCHS" ]; then
        echo "build-llama.sh: DECIDE_GPU=cuda needs nvidia-smi, or DECIDE_CUDA_ARCHITECTURES" \
             "naming the GPU's compute capability (90 for an H100 or H200)" >&2
        exit 2
    fi
    case "$ARCHS" in *-real|*-virtual) ;; *) ARCHS="$ARCHS-real" ;; esac
    EXTRA="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCHS -DGGML_CUDA_FA_QUANTS=f16-f16"
    EXTRA+=" -DGGML_CUDA_NCCL=OFF -DLLAVA_BUILD=OFF ${DECIDE_LLAMA_CMAKE_ARGS:-}"
    DECIDE_CPU_VARIANTS=none
    MARK=+cuda
elif [ -n "${DECIDE_GPU:-}" ]; then
    echo "build-llama.sh: DECIDE_GPU must be cuda (or unset), not '$DECIDE_GPU'" >&2
    exit 2
fi

host_has() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx "$1"; }

if [ -z "${DECIDE_CPU_BASELINE:-}" ]; then
    if [ "$(uname -m)" != x86_64 ]; then
        DECIDE_CPU_BASELINE=generic
    elif host_has avx2 && host_has fma && host_has f16c && host_has bmi2; then
        DECIDE_CPU_BASELINE=x86-64-v3
    else
        DECIDE_CPU_BASELINE=x86-64
    fi
fi

NO_AMX="-DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
NO_512="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
V3="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
V3+=" -DGGML_BMI2=ON"

flags_of() {
    case "$1" in
        x86-64-v4) echo "$V3 -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON" \
                        "-DGGML_AVX512_BF16=OFF $NO_AMX" ;;
        x86-64-v3) echo "$V3 $NO_512 $NO_AMX" ;;
        x86-64)    echo "-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF" \
                        "-DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF $NO_512 $NO_AMX" ;;
        generic)   echo "-DGGML_NATIVE=OFF" ;;
        native)    echo "-DGGML_NATIVE=ON" ;;
        *) echo "build-llama.sh: DECIDE_CPU_BASELINE must be x86-64-v3, x86-64, generic or" \
                "native, not '$1'" >&2; return 2 ;;
    esac
}

# wheel_for NAME: build (once) and print the path of the wheel for that instruction set
wheel_for() {
    local flags key cache
    flags="$(flags_of "$1") $EXTRA"
    key=$1
    [ -z "$EXTRA" ] || key+="-$(printf '%s' "$EXTRA" | sha256sum | cut -c1-8)"
    cache=${DECIDE_WHEEL_CACHE:-$HOME/.cache/decide/wheels}/llama-cpp-python-$VERSION-$key
    if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        echo "build-llama.sh: building llama-cpp-python $VERSION for $1" \
             "(a few minutes; cached in $cache)" >&2
        rm -rf "$cache.partial" && mkdir -p "$cache.partial"
        # shellcheck disable=SC2086  # DECIDE_PIP_WHEEL_ARGS: words of its own
        CMAKE_ARGS="$flags" "$PYTHON" -m pip wheel --quiet --no-cache-dir --no-deps \
            ${DECIDE_PIP_WHEEL_ARGS:-} --no-binary llama-cpp-python -w "$cache.partial" \
            "$SOURCE" >&2
        rm -rf "$cache" && mv "$cache.partial" "$cache"
    fi
    ls "$cache"/llama_cpp_python-*.whl
}

flags_of "$DECIDE_CPU_BASELINE" >/dev/null
BASELINE_WHEEL=$(wheel_for "$DECIDE_CPU_BASELINE")
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$BASELINE_WHEEL"
# llama-cpp-python's own dependencies (numpy, jinja2, diskcache, typing-extensions)
"$PYTHON" -m pip install --quiet "$BASELINE_WHEEL"
PREFIX=$("$PYTHON" -c 'import sys; print(sys.prefix)')
echo "$DECIDE_CPU_BASELINE$MARK" > "$PREFIX/.llama-baseline"

VARIANTS=$PREFIX/lib/decide-llama-variants
rm -rf "$VARIANTS"
if [ "${DECIDE_CPU_VARIANTS:-auto}" != none ] && [ "$DECIDE_CPU_BASELINE" = x86-64-v3 ]; then
    VARIANT_WHEEL=$(wheel_for x86-64-v4)
    mkdir -p "$VARIANTS/x86-64-v4"
    "$PYTHON" - "$VARIANT_WHEEL" "$VARIANTS/x86-64-v4" <<'EOF'
import sys, zipfile
from pathlib import Path

wheel, target = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith("llama_cpp/lib/") and ".so" in name:
            (target / Path(name).name).write_bytes(archive.read(name))
EOF
fi
