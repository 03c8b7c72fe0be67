#!/usr/bin/env bash
# Kiln eager and compiled (build/release/bench/harness) against PyTorch eager
# (bench/peers/run.sh) on the harness workloads, in paired rounds: each round
# runs, row by row, both sides back to back in alternating order, so a noisy
# stretch of the (shared) host hits both; each ratio printed is the median of
# the rounds' ratios.
#   bench/peers/compare.sh [--rounds N] [--only NAME,...] [--out DIR] [--nice]
#                          [--blas-core NAME|auto] [--harness PATH] [--torch-isa avx2]
# --nice: run in a new session whose autogroup gets nice -15 (root), so other
# users' builds on a shared host take little of the cores meanwhile.
# --blas-core: the OpenBLAS kernels of the kiln side (its GEMMs): NAME sets
# OPENBLAS_CORETYPE (Haswell, SkylakeX, ...), auto unsets it so that OpenBLAS
# detects the CPU (and kiln replaces its generic fallback on a CPU model it
# does not know: kiln::blas_core). Without it kiln gets the caller's environment, which on some
# hosts forces older kernels (OPENBLAS_CORETYPE=Haswell: AVX2 on an AVX-512
# CPU, half its sgemm rate). The kernels used are printed either way.
# --harness: another kiln harness binary (default $HARNESS, else the release
# build's), e.g. one built for x86-64-v3 in its own tree to measure AVX2 code.
# --torch-isa avx2: the PyTorch side capped to AVX2 (its ATen kernels through
# ATEN_CPU_CAPABILITY, oneDNN through ONEDNN_MAX_CPU_ISA, MKL through
# MKL_ENABLE_INSTRUCTIONS); the capability PyTorch reports is printed.
# Needs the release build of bench/harness; run.sh installs PyTorch on first use.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
harness="${HARNESS:-$root/build/release/bench/harness}"
rounds=3
blas_core=""
torch_isa=""
rows="gelu_tanh_16M softmax_4096x1024 layer_norm_4096x1024 adam_10M mlp_step_sgd transformer_fwd_bwd cnn_step_adam resnet_bn_onecycle"
out=""
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --only) rows="${2//,/ }"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --blas-core) blas_core="$2"; shift 2 ;;
    --harness) harness="$2"; shift 2 ;;
    --torch-isa) torch_isa="$2"; shift 2 ;;
    --nice)
      if [ -z "${PEERS_NICED:-}" ]; then
        export PEERS_NICED=1
        exec setsid sh -c 'echo -15 > /proc/self/autogroup && exec "$0" "$@"' "$0" "${args[@]}"
      fi
      shift ;;
    *) echo "usage: compare.sh [--rounds N] [--only NAME,...] [--out DIR] [--nice] [--blas-core NAME|auto]" \
            "[--harness PATH] [--torch-isa avx2]" >&2
       exit 2 ;;
  esac
done
[ -x "$harness" ] || { echo "compare.sh: $harness not built (cmake --build build/release --target harness)" >&2; exit 2; }
case "$torch_isa" in
  "") ;;
  avx2) export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  *) echo "compare.sh: --torch-isa takes avx2, got '$torch_isa'" >&2; exit 2 ;;
esac
[ -n "$out" ] || out="$(mktemp -d /tmp/kiln-peers-XXXXXX)"
mkdir -p "$out"
# The venv, before any timing; its first line names PyTorch's CPU capability.
torch_head="$("$root/bench/peers/run.sh" --only gelu_tanh_16M)"
echo "${torch_head%%$'\n'*}" | tee "$out/torch-isa.txt"

# The kiln side's environment (the PyTorch side keeps the caller's).
kiln_env=(env)
case "$blas_core" in
  "") ;;
  auto) kiln_env+=(-u OPENBLAS_CORETYPE) ;;
  *) kiln_env+=("OPENBLAS_CORETYPE=$blas_core") ;;
esac
echo "kiln: $harness, OPENBLAS_CORETYPE=$("${kiln_env[@]}" sh -c 'echo "${OPENBLAS_CORETYPE-(unset: OpenBLAS detects the CPU; the harness line names the kernels)}"')" \
  | tee "$out/blas-core.txt"

kiln() { "${kiln_env[@]}" "$harness" --only "$1" --json "$out/kiln-$2-$1.json" >"$out/kiln-$2-$1.txt"; }
peer() {
  local extra=""
  [ "$1" = adam_10M ] && extra=",adam_10M_fused"  # PyTorch's fused Adam beside its default
  "$root/bench/peers/run.sh" --only "$1$extra" --json "$out/torch-$2-$1.json" >"$out/torch-$2-$1.txt"
}
i=0
for r in $(seq 1 "$rounds"); do
  for row in $rows; do
    echo "round $r/$rounds: $row" >&2
    if [ $(((i + r) % 2)) -eq 0 ]; then kiln "$row" "$r"; peer "$row" "$r"; else peer "$row" "$r"; kiln "$row" "$r"; fi
    i=$((i + 1))
  done
done
python3 "$root/bench/peers/summarize.py" "$out"
echo "(raw figures in $out)"
