#!/usr/bin/env bash
# PyTorch eager on the harness workloads (bench/peers/torch_harness.py), in a
# virtual environment under build/ that this script creates on first use.
#   bench/peers/run.sh [torch_harness.py args: --only NAME,... --json FILE --threads N]
# Optional for users: nothing in kiln's build or tests needs it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PEERS_VENV:-$root/build/peers-venv}"
torch_spec="${PEERS_TORCH:-torch==2.15.0}"

# The venv and PyTorch from PyPI, once (about 5 GB: the PyPI wheel pulls its
# CUDA libraries, which it loads at import even on a CPU-only host).
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "run.sh: installing $torch_spec and numpy into $venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$torch_spec" numpy >&2
fi

# The kiln harness's setting: 2 threads (its pool's size on the 2-core host).
threads=2
# glibc malloc tuned (as the issue asks) so that PyTorch's large buffers are
# reused, not mmap'ed and unmapped (page-faulted afresh) on every call: mmap
# off (glibc caps MALLOC_MMAP_THRESHOLD_ at 32 MiB, below the 64 MiB GELU
# buffers), freed heap top kept (no trim) and grown in 256 MiB steps.
export MALLOC_MMAP_MAX_=0
export MALLOC_TRIM_THRESHOLD_=17179869184
export MALLOC_TOP_PAD_=268435456
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
exec "$venv/bin/python" -W ignore "$root/bench/peers/torch_harness.py" --threads "$threads" "$@"
