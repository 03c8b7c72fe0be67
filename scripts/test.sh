#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build, then the
# Debug+ASan+UBSan build (KILN_SKIP_SANITIZE=1 skips the second).
# The Release run includes libFuzzer smoke tests (30 s safetensors loader, 20 s
# IR parser; they first compile an instrumented runtime with clang, ~2 min);
# KILN_FUZZ=0 skips them, and scripts/fuzz.sh runs longer campaigns. Whole
# suite: ~15 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
fuzz=()
[ "${KILN_FUZZ:-1}" = 0 ] && fuzz=(-LE fuzz)
ctest --preset release -j "$jobs" "${fuzz[@]}"
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
