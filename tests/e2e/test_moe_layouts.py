"""MoE experts in every layout a checkpoint stores them in, for every MoE family.

transformers 5 keeps a layer's experts as two stacked parameters, mlp.experts.gate_up_proj [E, 2F, D]
(expert e: its F gate rows, then its F up rows) and mlp.experts.down_proj [E, D, F]; its save_pretrained
writes the Qwen MoE families back one tensor per expert by default (mlp.experts.N.gate_proj.weight ...);
MLX stacks gate, up and down apart (mlp.switch_mlp.*, Gemma 4: experts.switch_glu.*), quantized. Each
*_stacked fixture is its per-expert fixture rewritten by tools/restack_experts.py (same values, same
reference); test_parity*.py check them against the reference. Here: the tool reproduces them, both layouts
give the same logits bit for bit, the multimodal name prefix, f16 and f32 experts, MLX-quantized stacks
against the same values in f32, and clear errors for stacked tensors of the wrong shape.
"""
import hashlib
import json
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from test_parity import EXACT, FIX, TOL, reference, rel_err, run_eval

sys.path.insert(0, str(ROOT / "tools"))
from make_fixtures import mlx_quantize  # noqa: E402  (numpy only)

PAIRS = ["qwen3_moe", "qwen3_5_moe_text", "qwen3_next"]
_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32, "I64": np.int64}


def read_st(path):
    """-> {name: (tag, numpy array in the tag's storage dtype)}, metadata."""
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = np.dtype(_NP[info["dtype"]])
        out[name] = (info["dtype"], np.frombuffer(raw, dt, (e - b) // dt.itemsize, 8 + hlen + b).reshape(info["shape"]))
    return out, meta


def write_st(path, tensors, meta=None, shapes=None):
    """shapes: {name: shape} written into the header instead of the array's (same byte count)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        tag, arr = tensors[name]
        raw = np.ascontiguousarray(arr).tobytes()
        shape = (shapes or {}).get(name, list(arr.shape))
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def variant(tmp_path, base, name, edit, config=None):
    """A copy of fixture `base` whose tensors `edit` rewrites (it gets and returns the table, and may return
    header shapes too); the reference stays base's."""
    d = tmp_path / name
    shutil.copytree(FIX / base, d)
    tensors, meta = read_st(d / "model.safetensors")
    res = edit(dict(tensors))
    tensors, shapes = res if isinstance(res, tuple) else (res, None)
    write_st(d / "model.safetensors", tensors, meta, shapes)
    if config:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(config)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def as_f32(tag, arr):
    if tag == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def eval_dir(sg, tmp_path, d, ids, tag, env=None):
    out = tmp_path / f"{d.name}{tag}.logits"
    r = sg("eval", "--model", str(d), "--tokens", ",".join(map(str, ids)), "--logits-out", str(out),
           "--greedy", "12", "--kv", "f32", env=env)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4"), r.stdout.split()


@pytest.mark.parametrize("name", PAIRS)
def test_restack_tool_reproduces_the_committed_stacked_fixture(tmp_path, name):
    out = tmp_path / f"{name}_stacked"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "restack_experts.py"), str(FIX / name), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for f in sorted(p.name for p in (FIX / f"{name}_stacked").iterdir()):
        want = hashlib.sha256((FIX / f"{name}_stacked" / f).read_bytes()).hexdigest()
        assert hashlib.sha256((out / f).read_bytes()).hexdigest() == want, f
    names = read_st(out / "model.safetensors")[0]
    assert not any(".experts.0." in k for k in names)
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in names)


@pytest.mark.parametrize("name", PAIRS)
def test_stacked_and_per_expert_layouts_give_the_same_logits_bit_for_bit(sg, tmp_path, name):
    ids, _, greedy = reference(name)
    a, ta = eval_dir(sg, tmp_path, FIX / name, ids, "a")
    b, tb = eval_dir(sg, tmp_path, FIX / f"{name}_stacked", ids, "b")
    assert a.tobytes() == b.tobytes()
    assert ta == tb == [str(t) for t in greedy]


def prefixed(tensors):
    """The multimodal checkpoint's names: model.X -> model.language_model.X."""
    return {("model.language_model." + k[6:] if k.startswith("model.") else k): v for k, v in tensors.items()}


@pytest.mark.parametrize("base", ["qwen3_5_moe_text", "qwen3_5_moe_text_stacked"])
def test_experts_under_the_multimodal_prefix(sg, tmp_path, base):
    d = variant(tmp_path, base, "mm", prefixed)
    ids, want, greedy = reference(base)
    got, toks = eval_dir(sg, tmp_path, d, ids, "")
    assert rel_err(got.reshape(want.shape), want) <= TOL
    assert toks == [str(t) for t in greedy]


@pytest.mark.parametrize("dtype", ["F16", "F32"])
def test_f16_and_f32_experts_in_both_layouts(sg, tmp_path, dtype):
    def convert(tensors):
        return {k: ((dtype, as_f32(*v).astype(_NP[dtype])) if ".experts." in k else v) for k, v in tensors.items()}

    ids, want, greedy = reference("qwen3_moe")
    runs = []
    for base in ("qwen3_moe", "qwen3_moe_stacked"):
        d = variant(tmp_path, base, f"{base}_{dtype}", convert)
        got, toks = eval_dir(sg, tmp_path, d, ids, "")
        assert rel_err(got.reshape(want.shape), want) <= TOL, base
        assert toks == [str(t) for t in greedy], base
        runs.append(got.tobytes())
    assert runs[0] == runs[1]


# MLX-quantized experts (4-bit, group 32), in the layouts MLX writes, against the same dequantized values
# stored as an f32 gate_up_proj / down_proj: the same function, up to f32 rounding.
MLX_Q = {"group_size": 32, "bits": 4}


def quantized(tensors, module, gate_up, down, layout):
    """module: "model.layers.L.mlp.experts" (Qwen) or "model.layers.L.experts" (Gemma 4); gate_up [E, 2F, D]
    and down [E, D, F] float32. layout: "f32" (the dequantized values, stacked as transformers does),
    "switch" (MLX's separate stacks) or "fused" (a quantized gate_up_proj.weight)."""
    def q(w):
        e, r, c = w.shape
        packed, s, b, deq = mlx_quantize(w.reshape(e * r, c), MLX_Q["bits"], MLX_Q["group_size"])
        return packed.reshape(e, r, -1), s.reshape(e, r, -1), b.reshape(e, r, -1), deq.reshape(e, r, c)

    f = gate_up.shape[1] // 2
    parts = {"gate_up_proj": q(gate_up), "down_proj": q(down)}
    if layout == "f32":
        tensors[f"{module}.gate_up_proj"] = ("F32", parts["gate_up_proj"][3])
        tensors[f"{module}.down_proj"] = ("F32", parts["down_proj"][3])
        return tensors
    if layout == "switch":
        gu = parts.pop("gate_up_proj")
        parts["gate_proj"] = tuple(a[:, :f] for a in gu)
        parts["up_proj"] = tuple(a[:, f:] for a in gu)
        stem = module.replace(".experts", ".switch_mlp") if ".mlp." in module else module + ".switch_glu"
    else:
        stem = module
    for proj, (packed, s, b, _) in parts.items():
        tensors[f"{stem}.{proj}.weight"] = ("U32", packed)
        tensors[f"{stem}.{proj}.scales"] = ("BF16", s)
        tensors[f"{stem}.{proj}.biases"] = ("BF16", b)
    return tensors


def requantize(layout):
    def edit(tensors):
        modules = sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith(".experts.gate_up_proj")})
        assert modules
        for module in modules:
            gu = as_f32(*tensors.pop(f"{module}.gate_up_proj"))
            down = as_f32(*tensors.pop(f"{module}.down_proj"))
            quantized(tensors, module, gu, down, layout)
        return tensors
    return edit


@pytest.mark.parametrize("base,layout", [
    ("qwen3_moe_stacked", "switch"),        # mlx_lm's switch_mlp stacks
    ("qwen3_5_moe_text_stacked", "switch"),
    ("gemma4_text_moe", "switch"),          # mlx_lm / mlx_vlm: experts.switch_glu.*
    ("gemma4_text_moe", "fused"),           # a quantized gate_up_proj.weight, bound fused in place
])
def test_mlx_quantized_experts_match_their_values_in_f32(sg, tmp_path, base, layout):
    ids, _, _ = reference(base)
    ref_dir = variant(tmp_path, base, "f32", requantize("f32"))
    q_dir = variant(tmp_path, base, layout, requantize(layout), config={"quantization": MLX_Q})
    names = read_st(q_dir / "model.safetensors")[0]
    assert not any(k.endswith("gate_up_proj") for k in names)
    want, _ = eval_dir(sg, tmp_path, ref_dir, ids, "", env=EXACT)
    got, _ = eval_dir(sg, tmp_path, q_dir, ids, "", env=EXACT)
    # f32 rounding: the MLX kernels sum scale * q + bias in their own order (2e-7 to 5e-6 on x86)
    assert rel_err(got, want) <= 3e-5


def swap_inner(name):
    def edit(tensors):
        tag, arr = tensors[name]
        return tensors, {name: [arr.shape[0], arr.shape[2], arr.shape[1]]}
    return edit


def drop(pred):
    return lambda tensors: {k: v for k, v in tensors.items() if not pred(k)}


def first_experts(name, n):
    def edit(tensors):
        tag, arr = tensors[name]
        tensors[name] = (tag, arr[:n])
        return tensors
    return edit


QM = "model.layers.{}.mlp.experts"
BAD = [
    ("qwen3_moe_stacked", swap_inner(QM.format(1) + ".gate_up_proj"),
     QM.format(1) + ".gate_up_proj: expected float or quantized [64, 128, 8] (hidden, 2 x moe_intermediate_size, "
     "experts, innermost first), found BF16 [128, 64, 8]"),
    ("qwen3_moe_stacked", first_experts(QM.format(1) + ".down_proj", 7),
     QM.format(1) + ".down_proj: expected float or quantized [64, 64, 8] (moe_intermediate_size, hidden, experts, "
     "innermost first), found BF16 [64, 64, 7]"),
    ("qwen3_moe_stacked", drop(lambda k: k == QM.format(0) + ".down_proj"),
     QM.format(0) + ".down_proj: missing (the layer's experts are stacked: " + QM.format(0) + ".gate_up_proj is there)"),
    ("qwen3_5_moe_text_stacked", first_experts(QM.format(2) + ".gate_up_proj", 6),
     QM.format(2) + ".gate_up_proj: expected float or quantized [64, 64, 8] (hidden, 2 x moe_intermediate_size, "
     "experts, innermost first), found BF16 [64, 64, 6]"),
    ("gemma4_text_moe", first_experts("model.layers.0.experts.gate_up_proj", 3),
     "model.layers.0.experts.gate_up_proj: expected float or quantized [64, 64, 4] (hidden, 2 x moe_intermediate_size, "
     "experts, innermost first), found BF16 [64, 64, 3]"),
    ("qwen3_moe", drop(lambda k: k == QM.format(1) + ".5.up_proj.weight"),
     QM.format(1) + ".5.up_proj.weight: missing (8 experts, one tensor each)"),
    ("qwen3_moe", drop(lambda k: k.startswith(QM.format(0) + ".")),
     "layer 0: no experts: neither " + QM.format(0) + ".gate_up_proj (stacked), " + QM.format(0)
     + ".0.gate_proj.weight (one per expert) nor model.layers.0.mlp.switch_mlp.gate_proj.weight (MLX)"),
]


@pytest.mark.parametrize("base,edit,message", BAD, ids=[f"{b}-{i}" for i, (b, _, _) in enumerate(BAD)])
def test_bad_expert_tensors_are_clear_errors(sg, tmp_path, base, edit, message):
    d = variant(tmp_path, base, "bad", edit)
    r = sg("eval", "--model", str(d), "--tokens", "1,2,3", "--greedy", "1")
    assert r.returncode == 1
    assert message in r.stderr, r.stderr
    assert r.stdout == ""


def test_a_quantized_fused_gate_up_of_a_qwen_family_is_refused_by_name(sg, tmp_path):
    # no MLX writer stores one (they split it into switch_mlp.gate_proj / up_proj); the Qwen families
    # split a fused gate_up at load, which takes plain float rows
    d = variant(tmp_path, "qwen3_moe_stacked", "fused", requantize("fused"), config={"quantization": MLX_Q})
    r = sg("eval", "--model", str(d), "--tokens", "1,2,3", "--greedy", "1")
    assert r.returncode == 1
    assert (QM.format(0) + ".gate_up_proj.weight: MLX_AFFINE u4 g32 (bf16): this family splits a fused gate_up at "
            "load, which takes F32/F16/BF16") in r.stderr, r.stderr
