#!/usr/bin/env python3
"""A small CTranslate2 model.bin in the layout CTranslate2 writes (binary version 6), for tests.

The file holds every dtype CTranslate2 stores (float32, int8, int16, int32, float16, bfloat16),
an int8 weight with its per-row float32 scale, an int16 weight with its scalar scale, scalars
(rank 0), an empty variable and an alias, all with values a reader can recompute:
element i of a variable is i * step + start (see VARIABLES), rounded to the dtype.

  make_ct2.py [OUT_DIR]    default: tests/fixtures/ct2

writes OUT_DIR/model.bin and OUT_DIR/expected.json (spec, revision, and per variable its name,
dtype, shape outermost first, byte offset and size, and the values as float; the aliases).
Only numpy and struct: no CTranslate2 needed.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

SPEC, REVISION, VERSION = "TinySpec", 2, 6
DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")

# name, dtype, shape (outermost first), start, step; sorted by name as CTranslate2 writes them
VARIABLES = [
    ("decoder/activation", "int8", (), 3, 0),
    ("decoder/embeddings/weight", "float16", (5, 4), -1.0, 0.125),
    ("decoder/empty", "float32", (0, 3), 0, 0),
    ("decoder/layer_0/linear/bias", "bfloat16", (3,), 0.5, 0.25),
    ("decoder/layer_0/linear/weight", "int8", (3, 4), -6, 1),
    ("decoder/layer_0/linear/weight_scale", "float32", (3,), 10.0, 2.5),
    ("decoder/num_heads", "int16", (), 6, 0),
    ("encoder/conv/weight", "float32", (2, 3, 3), -2.0, 0.25),
    ("encoder/ids", "int32", (2, 2), -70000, 40000),
    ("encoder/proj/weight", "int16", (2, 3), -300, 101),
    ("encoder/proj/weight_scale", "float32", (), 1024.0, 0),
]
ALIASES = [("decoder/projection/weight", "decoder/embeddings/weight")]


def values(dtype, shape, start, step):
    n = int(np.prod(shape)) if shape else 1
    v = start + step * np.arange(n, dtype=np.float64)
    if dtype == "bfloat16":
        f = v.astype(np.float32)
        bits = (f.view(np.uint32) >> 16).astype(np.uint16)  # exact: the values have short mantissas
        return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32).astype(float).tolist()
    a = v.astype(np.dtype(dtype))
    return a.tobytes(), a.astype(float).tolist()


def string(s):
    b = s.encode("utf-8")
    return struct.pack("<H", len(b) + 1) + b + b"\0"


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/ct2")
    out.mkdir(parents=True, exist_ok=True)
    blob = bytearray(struct.pack("<I", VERSION) + string(SPEC) + struct.pack("<I", REVISION))
    blob += struct.pack("<I", len(VARIABLES))
    listing = []
    for name, dtype, shape, start, step in VARIABLES:
        data, vals = values(dtype, shape, start, step)
        blob += string(name) + struct.pack("<B", len(shape)) + b"".join(struct.pack("<I", d) for d in shape)
        blob += struct.pack("<BI", DTYPES.index(dtype), len(data))
        listing.append({"name": name, "dtype": dtype, "shape": list(shape), "offset": len(blob),
                        "nbytes": len(data), "values": vals})
        blob += data
    blob += struct.pack("<I", len(ALIASES))
    for alias, target in ALIASES:
        blob += string(alias) + string(target)
    (out / "model.bin").write_bytes(bytes(blob))
    expected = {"spec": SPEC, "revision": REVISION, "version": VERSION, "size": len(blob),
                "variables": listing, "aliases": [list(a) for a in ALIASES]}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{out / 'model.bin'}: {len(blob)} bytes, {len(VARIABLES)} variables, {len(ALIASES)} alias")


if __name__ == "__main__":
    main()
