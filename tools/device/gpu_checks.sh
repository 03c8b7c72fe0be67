#!/usr/bin/env bash
# Runs on a lent GPU machine (carry .device, made by tools/device/bundle.sh):
# the CUDA test suite, the examples with --device cuda and the probe, logs into
# $OUT (or ./device-out).
#   tools/device/gpu_checks.sh [--probe-only | --tests-and-harness]
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xJf .device/bundle.tar.xz
# NVRTC: the toolkit's, else pip's nvidia-cuda-nvrtc.
nvrtc_dir=$(dirname "$( (ls /usr/local/cuda/lib64/libnvrtc.so.13 2>/dev/null;
  find / -xdev -name 'libnvrtc.so.13' 2>/dev/null) | head -1)")
# NCCL: pip's nvidia-nccl-cu13 (the image's PyTorch uses it), else the toolkit's.
nccl_dir=$(dirname "$( (find / -xdev -path '*nvidia*' -name 'libnccl.so.2' 2>/dev/null;
  ls /usr/local/cuda/lib/libnccl.so.2 2>/dev/null) | head -1)")
# cuBLASLt: the toolkit's, else pip's nvidia-cublas.
cublas_dir=$(dirname "$( (ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null;
  find / -xdev -name 'libcublasLt.so.13' 2>/dev/null) | head -1)")
export LD_LIBRARY_PATH="$work/lib:$nvrtc_dir:$nccl_dir:$cublas_dir:${LD_LIBRARY_PATH:-}"
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "nvrtc from: $nvrtc_dir"; echo "nccl from: $nccl_dir"; echo "cublasLt from: $cublas_dir"; uname -r; lscpu | grep 'Model name'
} 2>&1 | tee "$out/env.txt"
export KILN_CACHE_DIR="$work/cache"
if [ "${1:-}" != "--probe-only" ]; then
"$work/bin/cuda_tests" 2>&1 | tee "$out/cuda_tests.txt"
echo "cuda_tests rc=${PIPESTATUS[0]}" | tee -a "$out/cuda_tests.txt"
# CUDA graphs (captured compiled steps replayed on the real driver, cuBLASLt
# inside a capture) and the expansions' bits, on their own: short, and named
# in the log (they ran on the emulated device only before).
"$work/bin/cuda_tests" --gtest_filter='CudaGraphs.*:CudaMath.*' 2>&1 | tee "$out/cuda_graphs.txt"
echo "cuda_graphs rc=${PIPESTATUS[0]}" | tee -a "$out/cuda_graphs.txt"
# GEMM epilogues on cuBLASLt (ran on the emulated device only before): f32 bias
# and bias + ReLU bit for bit against the unfused matmul + add (+ relu), f16/bf16
# within one rounding, cuBLASLt's GELU against kiln's tanh GELU (the deviation
# is printed: GELU epilogues stay off until it is known), eager linear and the
# compiled matmul+bias steps against eager.
"$work/bin/cuda_tests" --gtest_filter='CudaEpilogue.*' 2>&1 | tee "$out/cuda_epilogues.txt"
echo "cuda_epilogues rc=${PIPESTATUS[0]}" | tee -a "$out/cuda_epilogues.txt"
fi
if [ -z "${1:-}" ]; then
# nccl_tests: a one-rank communicator's all-reduce, and a one-rank NCCL process
# group (collectives, two eager DDP steps and four compiled whole DDP steps,
# collective nodes on the device, on the GPU against the CPU).
"$work/bin/nccl_tests" 2>&1 | tee "$out/nccl_tests.txt"
echo "nccl_tests rc=${PIPESTATUS[0]}" | tee -a "$out/nccl_tests.txt"
# Issue 20's GPU figures: the one-rank DDP step (an NCCL group of one) against
# the plain single-GPU step, eager and compiled, and a one-rank all-reduce's bus
# bandwidth (ran on the emulated device only before).
for c in "" --compile; do
  "$work/bin/ddp_bench" --device cuda --ranks 1 --iters 30 $c 2>&1 | tee -a "$out/ddp_bench.txt"
  echo "ddp_bench --device cuda --ranks 1 $c rc=${PIPESTATUS[0]}" | tee -a "$out/ddp_bench.txt"
done
fi
if [ "${1:-}" != "--probe-only" ]; then
# The examples' --device cuda (run on the emulated device only before): gpt and
# resnet on the CPU and the GPU, eager and compiled (the losses should agree;
# the LLVM-stub bundle runs --compile on the CPU eagerly: "0 trace(s)");
# the DDP example on one rank over NCCL, Fashion-MNIST's test set standing in
# for its training set.
ex="$out/examples.txt"
: > "$ex"
for c in "" --compile; do
  for d in cpu cuda; do
    "$work/bin/gpt" --device $d $c --sample 60 2>&1 | tee -a "$ex"
    echo "gpt --device $d $c rc=${PIPESTATUS[0]}" | tee -a "$ex"
    "$work/bin/resnet" --synthetic --device $d $c 2>&1 | tee -a "$ex"
    echo "resnet --device $d $c rc=${PIPESTATUS[0]}" | tee -a "$ex"
  done
done
fm="$work/fashion"
mkdir -p "$fm"
for k in images-idx3 labels-idx1; do
  ln -sf "$work/data/t10k-$k-ubyte.gz" "$fm/t10k-$k-ubyte.gz"
  ln -sf "$work/data/t10k-$k-ubyte.gz" "$fm/train-$k-ubyte.gz"
done
"$work/bin/kilnrun" --nproc-per-node 1 --master-port 0 "$work/bin/ddp_fashion_mnist" \
  --device cuda --root "$fm" --limit 4096 --test-limit 1000 --log-every 16 2>&1 | tee -a "$ex"
echo "ddp_fashion_mnist --device cuda rc=${PIPESTATUS[0]}" | tee -a "$ex"
fi
if [ "${1:-}" != "--tests-and-harness" ]; then
"$work/bin/cuda_probe" --n 16777216 --reps 30 2>&1 | tee "$out/cuda_probe.txt"
"$work/bin/cuda_probe" --n 268435456 --reps 10 2>&1 | tee -a "$out/cuda_probe.txt"
fi
[ "${1:-}" = "--probe-only" ] || "$work/bin/cuda_harness" --reps 15 2>&1 | tee "$out/cuda_harness.txt"
