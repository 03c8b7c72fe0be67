#!/usr/bin/env bash
# Sets up, builds (Release) and runs the main demo: the CNN on Fashion-MNIST,
# trained eagerly and then compiled, with the side-by-side table at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target fashion_mnist
# The small CNN on Fashion-MNIST, 2 epochs eager + 2 compiled (a few minutes on 2 cores).
./build/release/examples/fashion_mnist/fashion_mnist --model cnn --epochs 2 --compare
