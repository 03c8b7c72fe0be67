#!/usr/bin/env python3
"""Table of compare.sh's paired rounds: medians of per-round ratios.

  summarize.py DIR...   (each DIR holds kiln-ROUND-ROW.json and torch-ROUND-ROW.json;
                         the rounds of several runs are pooled, in the order given)

Besides the medians it prints each round's eager / torch ratio (rounds in
order) and best / best: the fastest kiln eager round over the fastest torch
round. On a shared host a side that loses a core for a while (PyTorch's
OpenMP loops wait for their slowest thread) makes single rounds slow; the best
rounds are the nearest to a quiet host, so best / best says whether a ratio
under 1 holds without that noise.
"""
import glob
import json
import os
import statistics
import sys


def load(dirs):
    kiln, torch = {}, {}  # (row, (run, round)) -> figures
    for run, d in enumerate(dirs):
        for side, into in (("kiln", kiln), ("torch", torch)):
            for path in glob.glob(os.path.join(d, side + "-*.json")):
                rnd = (run, int(os.path.basename(path).split("-")[1]))
                with open(path) as f:
                    for w in json.load(f)["workloads"]:
                        into[(w["name"], rnd)] = w
    return kiln, torch


def main():
    kiln, torch = load(sys.argv[1:])
    order = ["gelu_tanh_16M", "softmax_4096x1024", "layer_norm_4096x1024", "adam_10M",
             "mlp_step_sgd", "transformer_fwd_bwd", "cnn_step_adam", "resnet_bn_onecycle"]
    names = {r for r, _ in kiln}
    rows = [r for r in order if r in names] + sorted(names - set(order))
    med = statistics.median
    print("ms are medians over rounds; ratios are medians of the rounds' ratios; kiln eager: "
          "consecutive calls (eager_seq_ms) where the harness reports them")
    print(f"{'workload':<22} {'kiln eager':>10} {'torch eager':>11} {'kiln compiled':>13} "
          f"{'eager/torch':>11} {'compiled/torch':>14} {'best/best':>9} {'rounds':>6}  "
          "per-round eager/torch")

    def per_round(ke, te):
        return ", ".join(f"{a / b:.2f}" for a, b in zip(ke, te))

    for row in rows:
        rnds = sorted(r for (n, r) in kiln if n == row and (row, r) in torch)
        if not rnds:
            continue
        # Consecutive eager calls where the harness has them (as PyTorch's side
        # is timed), else the eager calls alternated with compiled ones.
        ke = [kiln[(row, r)].get("eager_seq_ms") or kiln[(row, r)]["eager_ms"] for r in rnds]
        kc = [kiln[(row, r)]["compiled_ms"] for r in rnds]
        te = [torch[(row, r)]["eager_ms"] for r in rnds]
        print(f"{row:<22} {med(ke):10.2f} {med(te):11.2f} {med(kc):13.2f} "
              f"{med([a / b for a, b in zip(ke, te)]):11.2f} "
              f"{med([a / b for a, b in zip(kc, te)]):14.2f} {min(ke) / min(te):9.2f} "
              f"{len(rnds):6d}  {per_round(ke, te)}")
        fused = [torch.get((row + "_fused", r)) for r in rnds]
        if all(fused):
            tf = [f["eager_ms"] for f in fused]
            print(f"{'  vs torch fused=True':<22} {'':10} {med(tf):11.2f} {'':13} "
                  f"{med([a / b for a, b in zip(ke, tf)]):11.2f} "
                  f"{med([a / b for a, b in zip(kc, tf)]):14.2f} {min(ke) / min(tf):9.2f} "
                  f"{len(rnds):6d}  {per_round(ke, tf)}")


if __name__ == "__main__":
    main()
