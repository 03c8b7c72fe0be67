#!/usr/bin/env python3
"""Checks the project's source rules that a machine can check.

  check_sources.py ROOT [--max-lines N]

- Every C++ source file (.h/.hpp/.cpp/.cu/.def) under the source folders has
  at most N lines (default 800): split such a file by family instead.
Exit status 1 lists every offending file with its size; 0 when all pass.
"""
import argparse
import os
import sys

SOURCE_DIRS = ["runtime", "ir", "passes", "codegen", "distributed", "examples", "bench", "tests",
               "tools"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cu", ".def")
SKIP_DIRS = {"corpus", "fixtures", "__pycache__"}


def source_files(root):
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--max-lines", type=int, default=800)
    args = ap.parse_args()
    too_long = []
    count = 0
    for path in source_files(args.root):
        count += 1
        with open(path, "rb") as f:
            lines = f.read().count(b"\n")
        if lines > args.max_lines:
            too_long.append((lines, os.path.relpath(path, args.root)))
    for lines, rel in sorted(too_long, reverse=True):
        print(f"{rel}: {lines} lines (limit {args.max_lines}): split it by family")
    print(f"check_sources: {count} files, {len(too_long)} over {args.max_lines} lines")
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
