#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build, then the
# Debug+ASan+UBSan build (KILN_SKIP_SANITIZE=1 skips the second).
# The Release run includes libFuzzer smoke tests (30 s safetensors loader, 20 s
# IR parser; they first compile an instrumented runtime with clang at -O0),
# run in the background while the sanitizer build compiles (libFuzzer uses one
# core); KILN_FUZZ=0 skips them, and scripts/fuzz.sh runs longer campaigns.
# Whole suite: 12-40 min on 2 cores from a fresh clone (see the README).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" -LE fuzz

fuzz_pid=""
fuzz_log=build/release/fuzz-smoke.log
if [ "${KILN_FUZZ:-1}" != 0 ]; then
  # One compile job: the sanitizer build is the critical path.
  KILN_FUZZ_JOBS=1 ctest --preset release -L fuzz >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
fi
status=0
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs" || status=$?
  [ "$status" = 0 ] && { ctest --preset asan -j "$jobs" || status=$?; }
fi
if [ -n "$fuzz_pid" ]; then
  fuzz_status=0
  wait "$fuzz_pid" || fuzz_status=$?
  echo "---- fuzz smoke tests (Release) ----"
  cat "$fuzz_log"
  [ "$fuzz_status" = 0 ] || status=$fuzz_status
fi
exit "$status"
