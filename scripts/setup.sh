#!/usr/bin/env bash
# Installs every system dependency kiln needs from Debian's apt. Idempotent and
# quiet: it runs apt only when a package is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  nlohmann-json3-dev dataset-fashion-mnist libcli11-dev
  clang-14 libclang-rt-14-dev clang-format-14
  llvm-19-dev libzstd-dev libxxhash-dev libgloo-dev
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers
  python3 python3-pip ccache
  libprotobuf-dev protobuf-compiler libisal-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Python side of the tests: PyPI's safetensors (the format's reference
# implementation) reads files kiln writes, and so does tensorboard's event
# reader (EventAccumulator). Installed only when missing.
PY=python3
py_missing=()
"$PY" -c "import safetensors, numpy" >/dev/null 2>&1 || py_missing+=(safetensors numpy)
"$PY" -c "import tensorboard.backend.event_processing.event_accumulator" >/dev/null 2>&1 ||
  py_missing+=(tensorboard)
if ((${#py_missing[@]})); then
  echo "setup: installing ${py_missing[*]} from PyPI"
  "$PY" -m pip install -q --disable-pip-version-check "${py_missing[@]}" >/dev/null 2>&1 ||
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages \
      "${py_missing[@]}" >/dev/null
fi
