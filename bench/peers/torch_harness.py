#!/usr/bin/env python3
"""PyTorch eager on the workloads of kiln's bench/harness.cpp.

Each row does the same work as the harness row of the same name (shapes,
dtypes, models, optimizers, loss); the figure is the median wall time of
`reps` calls after 3 warm-up calls (the harness's eager column warms up 3
times as well: its warm-up, the comparison call, time_ms's own warm-up).

  torch_harness.py [--only NAME,...] [--json FILE] [--threads N]

Threads: torch.set_num_threads(N) (default 2, the harness's pool on this
host); run it under the malloc settings that bench/peers/run.sh exports.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

N16M = 1 << 24


def time_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def gelu_row():
    x = torch.randn(N16M)
    return lambda: F.gelu(x, approximate="tanh"), 10


def softmax_row():
    x = torch.randn(4096, 1024)
    return lambda: torch.softmax(x, -1), 10


def layer_norm_row():
    x = torch.randn(4096, 1024)
    w, b = torch.ones(1024), torch.zeros(1024)
    return lambda: F.layer_norm(x, (1024,), w, b, 1e-5), 10


def adam_row(fused):
    # Ten tensors of 1M parameters with fixed gradients (harness AdamStep).
    params = []
    for _ in range(10):
        p = torch.randn(1_000_000, requires_grad=True)
        p.grad = torch.randn(1_000_000)
        params.append(p)
    # fused=None: PyTorch's default on CPU (the foreach implementation).
    opt = torch.optim.Adam(params, lr=1e-3, fused=True if fused else None)
    return opt.step, 10


def mlp_row():
    # bench/mlp_step.h: 784-1024-1024-10, ReLU, cross-entropy, SGD momentum 0.9, batch 128.
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(128, 784), torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, 10


def transformer_row():
    # Post-norm encoder block, ReLU, no dropout; B=16, L=128, D=256, 4 heads, FF 1024.
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0,
                                       batch_first=True)
    x = torch.randn(16, 128, 256)

    def step():
        layer.zero_grad()
        loss = layer(x).square().mean()
        loss.backward()
        return loss

    return step, 5


def fashion_cnn():
    # examples/fashion_mnist make_fashion_model("cnn").
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
                         nn.Linear(128, 10))


def cnn_row():
    model = fashion_cnn()
    model.eval()  # as the harness: no dropout
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, 5


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(ch)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(h)) + x)


def resnet_row():
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                          nn.ReLU(), ResBlock(32), ResBlock(32), nn.AvgPool2d(32), nn.Flatten(),
                          nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100000)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    return step, 5


ROWS = {
    "gelu_tanh_16M": gelu_row,
    "softmax_4096x1024": softmax_row,
    "layer_norm_4096x1024": layer_norm_row,
    "adam_10M": lambda: adam_row(False),
    "adam_10M_fused": lambda: adam_row(True),
    "mlp_step_sgd": mlp_row,
    "transformer_fwd_bwd": transformer_row,
    "cnn_step_adam": cnn_row,
    "resnet_bn_onecycle": resnet_row,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma list of rows: " + " ".join(ROWS))
    ap.add_argument("--json", default="", help="also write the figures here")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ROWS)
    for n in names:
        if n not in ROWS:
            sys.exit(f"torch_harness: unknown workload '{n}' (rows: {' '.join(ROWS)})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    for n in names:
        fn, reps = ROWS[n]()
        results.append({"name": n, "eager_ms": time_ms(fn, reps)})
        del fn
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'workload':<22} {'eager ms':>9}")
    for r in results:
        print(f"{r['name']:<22} {r['eager_ms']:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch_version": torch.__version__, "threads": torch.get_num_threads(),
                       "workloads": results}, f)


if __name__ == "__main__":
    main()
