#!/usr/bin/env bash
# Sets up, builds (Release) and runs the main demo: the CNN on Fashion-MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target fashion_mnist
# The small CNN on Fashion-MNIST, 3 epochs (a few minutes on 2 cores).
./build/release/examples/fashion_mnist/fashion_mnist --model cnn --epochs 3
