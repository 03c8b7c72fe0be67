#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build, then the
# Debug+ASan+UBSan build (KILN_SKIP_SANITIZE=1 skips the second).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
