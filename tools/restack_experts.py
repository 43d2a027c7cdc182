#!/usr/bin/env python3
"""Rewrite a model folder's per-expert MoE tensors into the stacked layout of transformers 5.

transformers 5 keeps a MoE layer's routed experts as two parameters of one module (Qwen3MoeExperts,
Qwen3_5MoeExperts, Qwen3NextExperts, Gemma4TextExperts):

    <layer>.mlp.experts.gate_up_proj  [experts, 2 * moe_intermediate, hidden]   expert e: its F gate rows,
                                                                                then its F up rows
    <layer>.mlp.experts.down_proj     [experts, hidden, moe_intermediate]

(no ".weight"; the forward splits gate_up with .chunk(2, dim=-1): gate first). Checkpoints written in that
layout come from save_pretrained(save_original_format=False), from re-saving a model that was loaded from
such a checkpoint, and from other writers (Qwen3.5-MoE releases). save_pretrained's default instead reverts
the Qwen MoE families to the layout their checkpoints were first published in, one tensor per expert:

    <layer>.mlp.experts.<e>.gate_proj.weight  [moe_intermediate, hidden]
    <layer>.mlp.experts.<e>.up_proj.weight    [moe_intermediate, hidden]
    <layer>.mlp.experts.<e>.down_proj.weight  [hidden, moe_intermediate]

This tool turns the second layout into the first with the same values (the bytes are moved, never
converted, so any dtype works), without torch: numpy only. config.json and every other file are copied
unchanged, so a fixture's ref.safetensors stays valid: the model computes the same function.

    python3 tools/restack_experts.py SRC_DIR OUT_DIR        one folder with a single model.safetensors
    python3 tools/restack_experts.py --fixtures tests/fixtures
        (re)makes <name>_stacked beside every per-expert MoE fixture and rewrites MANIFEST.json

The output file is written as tools/make_fixtures.py writes its files (sorted, aligned, no timestamps), so
the same input always gives the same bytes.
"""

import argparse
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import _DTYPES, write_manifest, write_safetensors  # noqa: E402

PER_EXPERT = re.compile(r"^(?P<module>.*\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")


def read_safetensors(path):
    """-> ({name: (tag, numpy array of the tag's storage dtype)}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        tag = info["dtype"]
        if tag not in _DTYPES:
            raise SystemExit(f"{path}: {name} has dtype {tag}, which this tool does not carry")
        b, e = info["data_offsets"]
        dt = np.dtype(_DTYPES[tag]).newbyteorder("<")
        arr = np.frombuffer(raw, dtype=dt, count=(e - b) // dt.itemsize, offset=8 + hlen + b)
        out[name] = (tag, arr.reshape(info["shape"]))
    return out, meta


def restack(tensors):
    """Per-expert tensors -> transformers 5's stacked gate_up_proj / down_proj. Returns the new table and the
    names of the expert modules that were stacked. Every other tensor is kept as it is."""
    groups = {}
    for name in tensors:
        m = PER_EXPERT.match(name)
        if m:
            groups.setdefault(m["module"], {}).setdefault(int(m["e"]), {})[m["proj"]] = name
    out = {k: v for k, v in tensors.items() if not PER_EXPERT.match(k)}
    for module, experts in sorted(groups.items()):
        n = len(experts)
        if sorted(experts) != list(range(n)):
            raise SystemExit(f"{module}: experts {sorted(experts)} are not 0..{n - 1}")
        gate_up, down, tag, shape = [], [], None, None
        for e in range(n):
            projs = experts[e]
            if sorted(projs) != ["down_proj", "gate_proj", "up_proj"]:
                raise SystemExit(f"{module}.{e}: has {sorted(projs)}, expected gate_proj, up_proj, down_proj")
            (tg, g), (tu, u), (td, d) = (tensors[projs[p]] for p in ("gate_proj", "up_proj", "down_proj"))
            if len({tg, tu, td} | ({tag} if tag else set())) != 1:
                raise SystemExit(f"{module}.{e}: mixed dtypes {tg}, {tu}, {td}")
            tag = tg
            if g.ndim != 2 or g.shape != u.shape or d.shape != g.shape[::-1]:
                raise SystemExit(f"{module}.{e}: gate {g.shape}, up {u.shape}, down {d.shape} do not fit together")
            if shape and g.shape != shape:
                raise SystemExit(f"{module}.{e}: shape {g.shape} differs from expert 0's {shape}")
            shape = g.shape
            gate_up.append(np.concatenate([g, u], axis=0))  # [2F, D]: the F gate rows, then the F up rows
            down.append(d)
        out[f"{module}.gate_up_proj"] = (tag, np.stack(gate_up))
        out[f"{module}.down_proj"] = (tag, np.stack(down))
    return out, sorted(groups)


def check(src, dst):
    """The stacked table holds exactly the per-expert values: gate_up[e, :F] is expert e's gate, [F:] its up."""
    for name, (tag, arr) in src.items():
        m = PER_EXPERT.match(name)
        if not m:
            assert dst[name][0] == tag and np.array_equal(dst[name][1], arr), name
            continue
        e, proj = int(m["e"]), m["proj"]
        if proj == "down_proj":
            got = dst[m["module"] + ".down_proj"][1][e]
        else:
            gu = dst[m["module"] + ".gate_up_proj"][1][e]
            f = gu.shape[0] // 2
            got = gu[:f] if proj == "gate_proj" else gu[f:]
        assert np.array_equal(got, arr), f"{name}: values moved wrongly"


def restack_folder(src_dir, out_dir):
    src_file = os.path.join(src_dir, "model.safetensors")
    if not os.path.isfile(src_file):
        raise SystemExit(f"{src_dir}: no model.safetensors (sharded folders are not handled)")
    tensors, meta = read_safetensors(src_file)
    stacked, modules = restack(tensors)
    if not modules:
        raise SystemExit(f"{src_file}: no per-expert tensors (<...>.experts.<e>.gate_proj.weight)")
    check(tensors, stacked)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    for f in sorted(os.listdir(src_dir)):
        if f != "model.safetensors" and os.path.isfile(os.path.join(src_dir, f)):
            shutil.copyfile(os.path.join(src_dir, f), os.path.join(out_dir, f))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), stacked, meta)
    again, _ = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    check(tensors, again)
    return modules


def per_expert_fixtures(root):
    names = []
    for d in sorted(os.listdir(root)):
        f = os.path.join(root, d, "model.safetensors")
        if d.endswith("_stacked") or not os.path.isfile(f):
            continue
        with open(f, "rb") as fh:
            (hlen,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(hlen))
        if any(PER_EXPERT.match(k) for k in header):
            names.append(d)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", nargs="?", help="folder with a per-expert model.safetensors")
    ap.add_argument("out", nargs="?", help="folder to write (replaced if it exists)")
    ap.add_argument("--fixtures", help="fixtures root: restack every per-expert MoE fixture into <name>_stacked")
    args = ap.parse_args()
    if args.fixtures:
        for name in per_expert_fixtures(args.fixtures):
            mods = restack_folder(os.path.join(args.fixtures, name), os.path.join(args.fixtures, name + "_stacked"))
            print(f"{name}_stacked: {len(mods)} expert modules stacked")
        write_manifest(args.fixtures)
        return 0
    if not args.src or not args.out:
        ap.error("give SRC_DIR OUT_DIR, or --fixtures ROOT")
    mods = restack_folder(args.src, args.out)
    print(f"{args.out}: {len(mods)} expert modules stacked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
