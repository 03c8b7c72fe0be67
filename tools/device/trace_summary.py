#!/usr/bin/env python3
"""Summarizes one category of a kiln Chrome trace: per span name (and sizes,
when the span has them), the count, the total and the median duration.
Used by gpu_checks.sh's profile step on the device spans ("device": each step
of a compiled plan timed by CUDA events, executor/device_timeline.h).
  trace_summary.py TRACE.json [CATEGORY] [ROWS]"""
import collections
import json
import statistics
import sys


def main():
    path = sys.argv[1]
    cat = sys.argv[2] if len(sys.argv) > 2 else "device"
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == cat:
            sizes = e.get("args", {}).get("sizes", "")
            spans[(e["name"], sizes)].append(e["dur"])
    total = sum(sum(d) for d in spans.values())
    print(f"{path}: {sum(len(d) for d in spans.values())} '{cat}' spans, {total / 1000:.3f} ms")
    ranked = sorted(spans.items(), key=lambda kv: -sum(kv[1]))
    for (name, sizes), durs in ranked[:rows]:
        print(f"  {name[:44]:44s} {sizes[:20]:20s} x{len(durs):<4d} total {sum(durs) / 1000:8.3f} ms"
              f"  median {statistics.median(durs):8.1f} us")


if __name__ == "__main__":
    main()
