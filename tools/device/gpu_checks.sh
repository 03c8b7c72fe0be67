#!/usr/bin/env bash
# Runs on a lent GPU machine (carry .device, made by tools/device/bundle.sh):
# the named steps in order, each under its own time limit, logs into $OUT (or
# ./device-out). A step that would start after KILN_GPU_DEADLINE seconds (from
# the script's start; default 480) is skipped and says so: device time is
# scarce, so one call runs what fits and names what it left out.
#   tools/device/gpu_checks.sh [STEP...]
# Steps: tests (all of cuda_tests), suites (cuda_tests, one process per suite,
# in parallel), backtraces (cuda-gdb's stack of the harness and of the tests
# KILN_GPU_BT_FILTERS names), nccl (nccl_tests), ddp (ddp_bench, one
# rank, eager and compiled), ddp_model (eager DDP's backward timeline measured
# here, fed to ddp_overlap_model: a MODEL of 8 GPUs), examples (gpt, resnet,
# the DDP example over kilnrun), probe (cuda_probe, 16M), probe_large (256M), harness (cuda_harness), profile (Chrome traces
# of the harness's compiled steps: launches synchronized, and timed by events), rows_held (the
# harness with row kernels streaming, and holding 16 per thread), warp_rows (warp rows against a block per
# row: the probe's sweep, the harness with KILN_CUDA_WARP_ROWS=0), remat_off (the MLP and
# transformer steps without the remat pass: what its memory-driven default costs in time on a
# GPU), column_warps_off (the harness with layer_norm's backward in its block-per-part form),
# passes_off (the transformer step without session 16's scatter_to_where pass, without fusion
# rule 12, sibling kernels merged, and without rule 13, stored bias sums as GEMM epilogues),
# pointers_off (the transformer step with the attention's head views copied before their batched
# products, KILN_CUDA_POINTER_BATCHES=0, instead of read and written in place through cuBLASLt's
# pointer arrays).
# No step: all of them.
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
start=$SECONDS
deadline=${KILN_GPU_DEADLINE:-480}
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

# run LOG LIMIT_S NAME CMD...: one command under its limit, appended to LOG,
# its exit status (124: over the limit) named in the log and in summary.txt.
run() {
  local log=$1 limit=$2 name=$3
  shift 3
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" 2>&1 | tee -a "$out/$log"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc ($((SECONDS - t0)) s)" | tee -a "$out/$log" "$out/summary.txt"
}

step_tests() {
  # Every test, CUDA graphs, the expansions' bits and the cuBLASLt epilogues
  # included (their lines: grep CudaGraphs/CudaMath/CudaEpilogue in the log).
  run cuda_tests.txt 240 cuda_tests "$work/bin/cuda_tests"
}
step_suites() {
  # The same tests, one process per suite, eight at a time: a crash stops
  # only its suite, and the summary names each suite's status.
  # A parameterized suite's name has a '/' (Forms/CudaScatterForms.): its
  # log's name has '_' there (2026-11-27's run lost that suite to the '/').
  "$work/bin/cuda_tests" --gtest_list_tests | awk '/^[^ ]/ && !/^Running main/{print $1}' |
    xargs -P 8 -I{} sh -c 'f=$(printf %s "{}" | tr / _);
      timeout -k 5 180 "$0" --gtest_filter="{}*" > "$1/suite_${f}txt" 2>&1;
      echo "suite {} rc=$?"' "$work/bin/cuda_tests" "$out" | sort | tee -a "$out/summary.txt"
  cat "$out"/suite_*txt > "$out/cuda_suites.txt" && rm -f "$out"/suite_*txt
  grep -E '^\[  (FAILED|SKIPPED) ' "$out/cuda_suites.txt" | sort -u | tee -a "$out/summary.txt"
}
step_backtraces() {
  # Where a crashing test or the harness dies: cuda-gdb (the image has no gdb)
  # prints the host stack; then the same runs with CUDA graphs off, to tell a
  # replay's fault from a plain run's.
  local gdb
  gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
  for f in ${KILN_GPU_BT_FILTERS:-}; do
    run backtraces.txt 60 "cuda-gdb cuda_tests $f" "$gdb" -q -batch -ex run -ex bt \
      --args "$work/bin/cuda_tests" --gtest_filter="$f"
    KILN_CUDA_GRAPHS=0 run backtraces.txt 60 "graphs off: cuda_tests $f" \
      "$work/bin/cuda_tests" --gtest_filter="$f"
  done
  run backtraces.txt 60 "cuda-gdb cuda_harness" "$gdb" -q -batch -ex run -ex bt \
    --args "$work/bin/cuda_harness" --reps 3
  KILN_CUDA_GRAPHS=0 run backtraces.txt 60 "graphs off: cuda_harness" \
    "$work/bin/cuda_harness" --reps 3
}
step_nccl() {
  # A one-rank communicator's all-reduce, and a one-rank NCCL process group
  # (collectives, eager DDP steps and compiled whole DDP steps, gradients
  # computed in device buckets) on the GPU against the CPU.
  run nccl_tests.txt 90 nccl_tests "$work/bin/nccl_tests"
}
step_ddp() {
  # Issue 20's GPU figures: the one-rank DDP step (an NCCL group of one)
  # against the plain single-GPU step, eager and compiled, and a one-rank
  # all-reduce's bus bandwidth.
  for c in "" --compile; do
    run ddp_bench.txt 60 "ddp_bench --device cuda --ranks 1 $c" \
      "$work/bin/ddp_bench" --device cuda --ranks 1 --iters 30 $c
  done
}
step_ddp_model() {
  # Issue 20's multi-GPU figure, labelled a MODEL: eager DDP's backward
  # timeline measured on this GPU (ddp_bench --ranks 1 prints it as "model
  # input: --ready MS:BYTES,... --end MS", from backward's start in device
  # time) through ddp_overlap_model: 8 GPUs in one node, ring all-reduce at
  # NVLink 4's 450 GB/s bus bandwidth each way (H100 and H200 SXM alike);
  # x0.5: a backward twice as fast (the compiled step's replays hide its timeline).
  run ddp_model.txt 60 "ddp_bench --device cuda --ranks 1 (timeline)" \
    "$work/bin/ddp_bench" --device cuda --ranks 1 --iters 30
  local input
  input=$(sed -n 's/^ *model input: //p' "$out/ddp_model.txt" | tail -1)
  if [ -z "$input" ]; then
    echo "ddp_model: ddp_bench printed no model input" | tee -a "$out/ddp_model.txt" "$out/summary.txt"
    return
  fi
  # $input is "--ready ... --end ...": split into its arguments on purpose.
  # shellcheck disable=SC2086
  run ddp_model.txt 30 "ddp_overlap_model --ranks 8" "$work/bin/ddp_overlap_model" $input \
    --ranks 8 --busbw 450 --scales 1,0.5
}
step_examples() {
  # The examples' --device cuda against the CPU, eager and compiled (the
  # losses should agree; the LLVM-stub bundle runs --compile on the CPU
  # eagerly: "0 trace(s)"); the DDP example on one rank over NCCL,
  # Fashion-MNIST's test set standing in for its training set.
  for c in "" --compile; do
    for d in cpu cuda; do
      run examples.txt 60 "gpt --device $d $c" "$work/bin/gpt" --device $d $c --sample 60
      run examples.txt 60 "resnet --device $d $c" "$work/bin/resnet" --synthetic --device $d $c
    done
  done
  local fm="$work/fashion"
  mkdir -p "$fm"
  for k in images-idx3 labels-idx1; do
    ln -sf "$work/data/t10k-$k-ubyte.gz" "$fm/t10k-$k-ubyte.gz"
    ln -sf "$work/data/t10k-$k-ubyte.gz" "$fm/train-$k-ubyte.gz"
  done
  run examples.txt 90 "ddp_fashion_mnist --device cuda" "$work/bin/kilnrun" --nproc-per-node 1 \
    --master-port 0 "$work/bin/ddp_fashion_mnist" --device cuda --root "$fm" --limit 4096 \
    --test-limit 1000 --log-every 16
}
step_probe() {
  run cuda_probe.txt 90 "cuda_probe 16M" "$work/bin/cuda_probe" --n 16777216 --reps 30
}
step_probe_large() {
  # Over 90 s on an H100 (2026-11-27): the host interpreter checks 256M elements.
  run cuda_probe.txt 240 "cuda_probe 256M" "$work/bin/cuda_probe" --n 268435456 --reps 10
}
step_profile() {
  # Where the compiled MLP and transformer steps spend their time, two ways:
  # (1) every launch synchronized (KILN_CUDA_SYNC=1, which also keeps CUDA
  # graphs off): kernel spans are device times plus a synchronization (~12 us
  # on an H200); (2) launches queued as usual, graphs off, each step timed by
  # CUDA events in the stream (the trace's "device" spans, track cuda:0),
  # summarized per kernel by trace_summary.py.
  for part in mlp transformer; do
    KILN_CUDA_SYNC=1 KILN_PROFILE="$out/profile_$part.json" run profile.txt 60 "profile $part" \
      "$work/bin/cuda_harness" --reps 2 --only $part
    KILN_CUDA_GRAPHS=0 KILN_PROFILE="$out/timeline_$part.json" run profile.txt 60 \
      "device timeline $part" "$work/bin/cuda_harness" --reps 2 --only $part
    run profile.txt 20 "device timeline $part, per kernel" \
      python3 tools/device/trace_summary.py "$out/timeline_$part.json" device 40
  done
}
step_rows_held() {
  # Every row streaming (KILN_CUDA_ROW_HELD=0: no held twins) and twins
  # holding 16 per thread, against the default's twins (32) in the harness
  # step: the rows and the MLP and transformer steps.
  for n in 0 16; do
    KILN_CUDA_ROW_HELD=$n run cuda_harness.txt 60 "cuda_harness, KILN_CUDA_ROW_HELD=$n" \
      "$work/bin/cuda_harness" --reps 15
  done
}
step_warp_rows() {
  # Warp rows against a block per row on the probe's softmax / layer_norm rows
  # of 64-1024, then the harness's rows and steps with warp rows off.
  run cuda_probe.txt 90 "cuda_probe --only warp_rows" "$work/bin/cuda_probe" --only warp_rows
  KILN_CUDA_WARP_ROWS=0 run cuda_harness.txt 150 "cuda_harness, KILN_CUDA_WARP_ROWS=0" \
    "$work/bin/cuda_harness" --reps 15
}
step_remat_off() {
  # The default remat policy saves memory (its model is bytes, not traffic):
  # the transformer's GELU forward stores z and 1 + erf and its backward
  # computes the GELU output again from them. Without the pass, against the
  # harness step's default plan (run the harness step in the same call).
  for part in mlp transformer; do
    KILN_DISABLE_PASSES=remat run cuda_harness.txt 60 "cuda_harness $part, KILN_DISABLE_PASSES=remat" \
      "$work/bin/cuda_harness" --reps 15 --only $part
  done
}
step_column_warps_off() {
  # Row kernels with column sums one block per part (the form before session
  # 15's column warps), against the harness step's default in the same call.
  KILN_CUDA_COLUMN_WARPS=0 run cuda_harness.txt 150 "cuda_harness, KILN_CUDA_COLUMN_WARPS=0" \
    "$work/bin/cuda_harness" --reps 15
}
step_passes_off() {
  # The transformer step without the cross-entropy one-hot as a select
  # (scatter_to_where), without sibling kernels merged (fusion rule 12), and
  # without stored bias sums left to the GEMM epilogue (rule 13), against the
  # harness step's default in the same call.
  for off in scatter_to_where fuse_siblings fuse_gemm_bias; do
    KILN_DISABLE_PASSES=$off run cuda_harness.txt 60 "cuda_harness transformer, KILN_DISABLE_PASSES=$off" \
      "$work/bin/cuda_harness" --reps 15 --only transformer
  done
}
step_pointers_off() {
  # The attention's head views copied before each batched product (the
  # path before pointer arrays) against the harness step's default.
  KILN_CUDA_POINTER_BATCHES=0 run cuda_harness.txt 60 \
    "cuda_harness transformer, KILN_CUDA_POINTER_BATCHES=0" \
    "$work/bin/cuda_harness" --reps 15 --only transformer
}
step_harness() {
  run cuda_harness.txt 150 cuda_harness "$work/bin/cuda_harness" --reps 15
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests nccl ddp examples probe harness profile)
for s in "${steps[@]}"; do
  if [ $((SECONDS - start)) -ge "$deadline" ]; then
    echo "$s skipped: past the ${deadline} s deadline" | tee -a "$out/summary.txt"
    continue
  fi
  "step_$s"
done
echo "total $((SECONDS - start)) s" | tee -a "$out/summary.txt"
# At most 8 files come back from a device call: past that, everything but the
# summary travels as one archive (2026-11-27 lost its two profiles that way).
if [ "$(ls "$out" | wc -l)" -gt 8 ]; then
  (cd "$out" && ls | grep -vx summary.txt | tar -czf logs.tar.gz -T - &&
    ls | grep -vx -e summary.txt -e logs.tar.gz | xargs rm -f)
fi
