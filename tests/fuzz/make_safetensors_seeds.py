#!/usr/bin/env python3
"""Writes the seed corpus tests/fuzz/corpus/safetensors/ (a few tiny files).

Valid seeds come from the reference implementation (PyPI `safetensors`);
invalid ones are hand-made near misses. The fuzzer runs on a scratch copy,
so its discoveries never land here.
"""
import os
import struct

import numpy as np
from safetensors.numpy import save

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def raw(header: str, data: bytes = b"") -> bytes:
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


SEEDS = {
    "valid_empty": save({}),
    "valid_metadata": save({}, metadata={"format": "pt"}),
    "valid_f32": save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}),
    "valid_mixed": save({
        "a": np.array([1, -2], dtype=np.int64), "b": np.array(1.5, dtype=np.float64),
        "c": np.array([0.5, 2], dtype=np.float16), "d": np.array([7], dtype=np.int32),
        "e": np.array([1, 255], dtype=np.uint8), "f": np.array([True, False]),
        "g": np.zeros((0, 4), dtype=np.float32),
    }, metadata={"m": "x"}),
    "valid_bf16": raw('{"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}',
                      b"\x80\x3f\x40\xc0"),
    "bad_overlap": raw('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                       '"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "bad_duplicate": raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                         '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "bad_length": raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"abcd"),
    "bad_dtype": raw('{"a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}', b"ab"),
    "bad_truncated": save({"w": np.ones(4, dtype=np.float32)})[:-3],
    "bad_metadata": raw('{"__metadata__":{"k":1}}'),
    "bad_huge_shape": raw('{"a":{"dtype":"U8","shape":[0,18446744073709551615],'
                          '"data_offsets":[0,0]}}'),
}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {OUT}")


if __name__ == "__main__":
    main()
