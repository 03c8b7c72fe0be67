"""PyTorch 2.x on remat_bench's workloads (issue 17): step time or peak memory
of one variant per process.

  remat_torch.py --workload mlp|transformer [--batch 256] --variant eager|checkpoint
                 --measure time|memory [--reps 9] [--threads 2]

memory: the process's peak resident set above its resident set just before
the timed steps (the model, optimizer state and batch exist; the previous
gradients are dropped first, as remat_bench does). Run it with
MALLOC_MMAP_THRESHOLD_=4096 so every buffer is its own mapping and a free returns
it at once: the peak RSS then follows live bytes (page granular). The peak is
reset through /proc/self/clear_refs (Linux >= 4.0). time: the median step in
ms, run with bench/peers/run.sh's malloc settings instead (reused buffers).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def model_and_input(workload, batch):
    torch.manual_seed(11)
    if workload == "mlp":
        blocks = [nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(16)]
        x = torch.randn(batch, 256)
    else:
        blocks = [nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu",
                                             batch_first=True) for _ in range(4)]
        x = torch.randn(16, 128, 256)
    return nn.ModuleList(blocks), x


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--variant", default="eager")
    ap.add_argument("--measure", default="time")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    blocks, x = model_and_input(a.workload, a.batch)
    opt = torch.optim.SGD(blocks.parameters(), lr=1e-3, momentum=0.9)
    ck = a.variant == "checkpoint"

    def step():
        opt.zero_grad()
        h = x
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False) if ck else b(h)
        loss = h.square().mean()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    if a.measure == "memory":
        opt.zero_grad()
        before = status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        loss = step()
        peak = status_kib("VmHWM")
        print(f"{a.workload} {a.variant} peak_mib {(peak - before) / 1024:.1f} loss {loss:.6g}"
              f" (rss before {before} KiB, after {status_kib('VmRSS')} KiB)")
    else:
        ms = []
        for _ in range(a.reps):
            opt.zero_grad()
            t0 = time.perf_counter()
            loss = step()
            ms.append((time.perf_counter() - t0) * 1e3)
        print(f"{a.workload} {a.variant} step_ms {statistics.median(ms):.1f} loss {loss:.6g}")


if __name__ == "__main__":
    main()
