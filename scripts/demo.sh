#!/usr/bin/env bash
# Sets up, builds (Release) and runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target mlp
./build/release/examples/mlp/mlp
