#!/usr/bin/env bash
# Builds what a lent GPU machine runs and packs it into .device/bundle.tar.xz
# (that machine has the CUDA libraries from pip but none of kiln's Debian
# dependencies, and receives at most 64 MiB). The build uses the LLVM stub
# (libLLVM alone is 123 MiB): compiled graphs there run through the GPU path.
#   tools/device/bundle.sh            # then: tools/device/gpu_checks.sh on the device
# To bundle a commit while the checkout has uncommitted work, build a clean
# worktree of it in the checkout's place, so ccache's entries still match:
#   git worktree add --detach ../devtree HEAD
#   unshare -m sh -c 'mount --bind ../devtree "$PWD" && cd "$PWD" && tools/device/bundle.sh'
#   cp ../devtree/.device/bundle.tar.xz .device/
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=build/device
# The examples gpu_checks.sh runs with --device cuda, kilnrun for the DDP one,
# ddp_bench for the one-rank DDP step against the plain GPU step, and
# ddp_overlap_model for the 8-GPU model fed by its backward timeline.
targets=(cuda_tests cuda_probe cuda_harness nccl_tests gpt resnet ddp_fashion_mnist kilnrun ddp_bench
  ddp_overlap_model)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_LLVM=OFF \
    $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
fi
cmake -S . -B "$build" -DKILN_BUILD_EXAMPLES=ON >/dev/null  # older bundle dirs had them off
cmake --build "$build" --target "${targets[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/tests/codegen/cuda/cuda_tests" "$build/bench/cuda_probe" "$build/bench/cuda_harness" \
  "$build/tests/distributed/nccl/nccl_tests" "$build/examples/gpt/gpt" \
  "$build/examples/resnet/resnet" "$build/examples/ddp/ddp_fashion_mnist" \
  "$build/distributed/launcher/kilnrun" "$build/bench/ddp_bench" "$build/bench/ddp_overlap_model" \
  "$stage/bin/"
# Fashion-MNIST's test set (4.4 MB) for the DDP example there (it stands in
# for the 26 MB training set too).
mkdir -p "$stage/data"
cp /usr/share/datasets/fashion-mnist/t10k-* "$stage/data/" 2>/dev/null || true
# Every shared library they load, except the C/C++ runtime the device's newer
# Ubuntu already has.
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
mkdir -p .device
# Keep the bundle out of git where this is a checkout (a clean tree bound over
# the checkout's path, to reuse ccache's entries, is none).
if exclude=$(git rev-parse --git-path info/exclude 2>/dev/null); then
  grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
fi
tar -C "$stage" -cJf .device/bundle.tar.xz bin lib data
ls -la .device/bundle.tar.xz
