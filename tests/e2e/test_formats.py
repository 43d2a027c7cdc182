"""Weight formats against the reference writers and dequantizers.

The Python `gguf` package (GGUFWriter, gguf.quants) and the `safetensors` package write the
files; the C side is reached through the reference dequantizers (an internal function: ctypes loads
build/test/libsaragossa-internal.so, the library's twin that exports every function, since
libsaragossa.so exports the public API only) and the `saragossa inspect` CLI. Values are compared
bit for bit.
"""
import ctypes
import os
import pathlib
import re
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize, quantize  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("SARAGOSSA_BIN", str(ROOT / "build" / "saragossa"))
LIB = pathlib.Path(BIN).parent / "test" / "libsaragossa-internal.so"
T = gguf.GGMLQuantizationType

# byte offsets of the f16 scale fields in one block, so random blocks have finite scales
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}


@pytest.fixture(scope="module")
def lib():
    if not LIB.exists():
        pytest.skip(f"{LIB} not built (make test-e2e builds it)")
    lib = ctypes.CDLL(str(LIB))
    lib.sg_dequantize_ref.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.sg_dequantize_ref.restype = None
    return lib


def c_dequant(lib, qtype, raw, n):
    raw = np.ascontiguousarray(raw)
    out = np.zeros(n, dtype=np.float32)
    lib.sg_dequantize_ref(int(qtype), raw.ctypes.data, out.ctypes.data, n)
    return out


def bits_equal(a, b):
    a = np.asarray(a, dtype=np.float32).reshape(-1)
    b = np.asarray(b, dtype=np.float32).reshape(-1)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("name", sorted(SCALE_OFFSETS))
def test_reference_dequantizer_matches_gguf_package_on_random_blocks(lib, name):
    qt = T[name]
    bs, tb = gguf.GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(sum(map(ord, name)))
    nb = 96
    raw = rng.integers(0, 256, size=(nb, tb), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        raw[:, off:off + 2] = rng.uniform(-3, 3, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    want = dequantize(raw.reshape(-1), qt)
    got = c_dequant(lib, qt, raw, nb * bs)
    assert bits_equal(want, got), f"{name}: {np.sum(want.reshape(-1) != got)} values differ"


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16"])
def test_reference_dequantizer_matches_gguf_package_on_quantized_weights(lib, name):
    qt = T[name]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 256)) * 0.05).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block (d = 0)
    q = quantize(x, qt)
    want = dequantize(q, qt)
    got = c_dequant(lib, qt, q, x.size)
    assert bits_equal(want, got)


def test_f16_and_plain_types_convert_exactly(lib):
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = c_dequant(lib, T.F16, h, h.size)
    want = h.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert bits_equal(want[~nan], got[~nan])
    b = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    got = c_dequant(lib, T.BF16, (np.arange(65536, dtype=np.uint32)).astype(np.uint16), 65536)
    assert np.array_equal(np.isnan(got), np.isnan(b))
    assert bits_equal(b[~np.isnan(b)], got[~np.isnan(b)])


# ---------------------------------------------------------------------------------------------
# Files written by the reference writers, read back through `saragossa inspect`.

import json  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from safetensors.numpy import save_file  # noqa: E402


def run_inspect(*args, check=True):
    p = subprocess.run([BIN, "inspect", *map(str, args)], capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def fields(out):
    d = {}
    for line in out.splitlines():
        if ": " in line and not line.startswith(" "):
            k, v = line.split(": ", 1)
            d.setdefault(k, v)
    return d


def tensor_rows(out):
    rows = {}
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("name "))
    for l in lines[start + 1:]:
        name, rest = l.split(None, 1)
        shape = rest[rest.index("["):rest.index("]") + 1]
        typ = rest[:rest.index("[")].strip()
        off = int(rest[rest.index("]") + 1:].split()[0])
        rows[name] = (typ, json.loads(shape), off)
    return rows


def dump(path, name, tmp_path):
    out = tmp_path / "dump.f32"
    run_inspect(path, "--dump", name, "--out", out)
    return np.fromfile(out, dtype=np.float32)


def random_blocks(name, n_blocks, rng):
    qt = T[name]
    _, tb = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(n_blocks, tb), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        raw[:, off:off + 2] = rng.uniform(-2, 2, n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw


def write_llama_gguf(path, tensors, extra_kv=None):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_uint32("llama.embedding_length", 256)
    w.add_uint32("llama.feed_forward_length", 512)
    w.add_uint32("llama.context_length", 4096)
    w.add_uint32("llama.attention.head_count", 8)
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(300)])
    for k, fn in (extra_kv or {}).items():
        fn(w, k)
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_written_by_gguf_package_round_trips_every_type(tmp_path):
    rng = np.random.default_rng(7)
    tensors, want = [], {}
    x = rng.standard_normal((4, 512)).astype(np.float32)
    tensors.append(("plain.f32", x, None))
    want["plain.f32"] = ("F32", x)
    h = x.astype(np.float16)
    tensors.append(("plain.f16", h, None))
    want["plain.f16"] = ("F16", h.astype(np.float32))
    for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16"]:
        q = quantize(x, T[name])
        tensors.append((f"quant.{name}", q, T[name]))
        want[f"quant.{name}"] = (name, dequantize(q, T[name]))
    for name in ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]:
        bs, tb = gguf.GGML_QUANT_SIZES[T[name]]
        raw = random_blocks(name, 4 * 512 // bs, rng).reshape(4, -1)
        tensors.append((f"rand.{name}", raw, T[name]))
        want[f"rand.{name}"] = (name, dequantize(raw, T[name]))
    path = tmp_path / "all.gguf"
    write_llama_gguf(path, tensors)
    out = run_inspect(path, "--tensors").stdout
    f = fields(out)
    assert f["arch"] == "llama"
    assert f["tensors"] == str(len(tensors))
    assert f["layers"] == "2" and f["dim"] == "256" and f["kv_heads"] == "2"
    rows = tensor_rows(out)
    reader = gguf.GGUFReader(str(path))
    offsets = {t.name: int(t.data_offset) for t in reader.tensors}
    for name, (typ, ref) in want.items():
        assert rows[name][0] == typ
        assert rows[name][1] == [512, 4]
        assert rows[name][2] == offsets[name]
        got = dump(path, name, tmp_path)
        assert bits_equal(ref, got), name


def test_gguf_metadata_of_every_value_type_including_nested_arrays(tmp_path):
    path = tmp_path / "meta.gguf"
    kv = {
        "t.u8": lambda w, k: w.add_uint8(k, 200), "t.i8": lambda w, k: w.add_int8(k, -100),
        "t.u16": lambda w, k: w.add_uint16(k, 60000), "t.i16": lambda w, k: w.add_int16(k, -30000),
        "t.i32": lambda w, k: w.add_int32(k, -2), "t.u64": lambda w, k: w.add_uint64(k, 1 << 40),
        "t.i64": lambda w, k: w.add_int64(k, -(1 << 40)), "t.f64": lambda w, k: w.add_float64(k, 0.125),
        "t.bool": lambda w, k: w.add_bool(k, True), "t.str": lambda w, k: w.add_string(k, "héllo"),
        "t.nested": lambda w, k: w.add_array(k, [[1, 2, 3], [4, 5]]),
        "t.strs": lambda w, k: w.add_array(k, ["a", "bc", ""]),
    }
    write_llama_gguf(path, [("w", np.ones((2, 32), np.float32), None)], kv)
    out = run_inspect(path)
    assert fields(out.stdout)["arch"] == "llama"


def write_hf_folder(folder, config, tensors, shards=1):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        part = {n: tensors[n] for n in names[s::shards]}
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(folder / fn))
        weight_map.update({n: fn for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


LLAMA_CONFIG = {
    "model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
    "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_folder_every_safetensors_dtype_round_trips(tmp_path, shards):
    rng = np.random.default_rng(3)
    t = {
        "a.f64": rng.standard_normal((3, 5)),
        "a.f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "a.f16": rng.standard_normal((6, 2)).astype(np.float16),
        "a.i64": rng.integers(-1000, 1000, (7,), dtype=np.int64),
        "a.i32": rng.integers(-1000, 1000, (7,), dtype=np.int32),
        "a.i16": rng.integers(-1000, 1000, (7,), dtype=np.int16),
        "a.i8": rng.integers(-100, 100, (7,), dtype=np.int8),
        "a.u8": rng.integers(0, 255, (7,), dtype=np.uint8),
        "a.u32": rng.integers(0, 1 << 20, (4, 2), dtype=np.uint32),
        "a.bool": rng.integers(0, 2, (9,)).astype(bool),
        "a.empty": np.zeros((0, 4), np.float32),
    }
    want = {k: v.astype(np.float32) for k, v in t.items()}
    folder = tmp_path / "hf"
    write_hf_folder(folder, LLAMA_CONFIG, t, shards)
    # BF16 and F8 have no numpy dtype: write them with a hand-made header into another shard-free file
    out = run_inspect(folder, "--tensors").stdout
    f = fields(out)
    assert f["arch"] == "llama" and f["format"] == f"safetensors ({shards} file{'s' if shards > 1 else ''})"
    rows = tensor_rows(out)
    for name, arr in t.items():
        assert rows[name][1] == list(arr.shape[::-1]), name
        if arr.size:
            assert bits_equal(want[name], dump(folder, name, tmp_path)), name


def raw_safetensors(path, entries, data, pad_header=0):
    header = json.dumps(entries).encode() + b" " * pad_header
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_bf16_and_f8_safetensors_convert_exactly(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(64).astype(np.float32)
    b = bf16_bits(x)
    e4 = np.arange(256, dtype=np.uint8)
    e5 = np.arange(256, dtype=np.uint8)
    data = b.tobytes() + e4.tobytes() + e5.tobytes()
    entries = {
        "bf": {"dtype": "BF16", "shape": [8, 8], "data_offsets": [0, 128]},
        "e4": {"dtype": "F8_E4M3", "shape": [256], "data_offsets": [128, 384]},
        "e5": {"dtype": "F8_E5M2", "shape": [256], "data_offsets": [384, 640]},
        "__metadata__": {"format": "pt"},
    }
    path = tmp_path / "x.safetensors"
    raw_safetensors(path, entries, data, pad_header=5)
    assert bits_equal((b.astype(np.uint32) << 16).view(np.float32), dump(path, "bf", tmp_path))
    # E5M2 is the top byte of an f16
    want5 = (e5.astype(np.uint16) << 8).view(np.float16).astype(np.float32)
    got5 = dump(path, "e5", tmp_path)
    assert np.array_equal(np.isnan(want5), np.isnan(got5))
    assert bits_equal(want5[~np.isnan(want5)], got5[~np.isnan(want5)])
    # E4M3 (fn): bias 7, no infinities, 0x7f/0xff NaN; reference from the definition
    s = np.where(e4 & 0x80, -1.0, 1.0)
    e = (e4 >> 3) & 0xF
    m = (e4 & 7).astype(np.float64)
    want4 = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7)) * s
    want4[(e4 & 0x7F) == 0x7F] = np.nan
    got4 = dump(path, "e4", tmp_path)
    assert np.array_equal(np.isnan(want4), np.isnan(got4))
    assert np.array_equal(want4[~np.isnan(want4)].astype(np.float32), got4[~np.isnan(want4)])


# ---- MLX affine ---------------------------------------------------------------------------------

def mlx_quantize(w, bits, group):
    """Independent numpy implementation of the MLX affine layout (quantize + pack)."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    lo, hi = g.min(-1), g.max(-1)
    n = (1 << bits) - 1
    scale = np.where(hi > lo, (hi - lo) / n, 1.0).astype(np.float32)
    scale16 = bf16_bits(scale)
    bias16 = bf16_bits(lo)
    s = (scale16.astype(np.uint32) << 16).view(np.float32)
    b = (bias16.astype(np.uint32) << 16).view(np.float32)
    q = np.clip(np.round((g - b[..., None]) / s[..., None]), 0, n).astype(np.uint64).reshape(rows, cols)
    # element j of a row sits at bit j*bits of the row's little-endian bit stream
    bitpos = np.arange(cols, dtype=np.uint64) * np.uint64(bits)
    packed = np.zeros((rows, cols * bits // 32), dtype=np.uint64)
    for k in range(bits):
        bit = (q >> np.uint64(k)) & np.uint64(1)
        pos = bitpos + np.uint64(k)
        np.add.at(packed, (slice(None), (pos // 32).astype(np.int64)), bit << (pos % 32))
    want = (q.reshape(rows, cols // group, group) * s[..., None] + b[..., None]).reshape(rows, cols)
    return packed.astype(np.uint32), scale16, bias16, want.astype(np.float32)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_mlx_affine_folder_dequantizes_like_numpy_for_every_group(tmp_path, bits):
    rng = np.random.default_rng(bits)
    for group in (32, 64, 128):
        rows, cols = 6, 256
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        packed, sc, bi, want = mlx_quantize(w, bits, group)
        folder = tmp_path / f"mlx{bits}_{group}"
        folder.mkdir()
        cfg = dict(LLAMA_CONFIG, quantization={"group_size": group, "bits": bits})
        (folder / "config.json").write_text(json.dumps(cfg))
        sc_off, bi_off = packed.nbytes, packed.nbytes + sc.nbytes
        entries = {
            "model.layers.0.mlp.up_proj.weight": {"dtype": "U32", "shape": list(packed.shape), "data_offsets": [0, sc_off]},
            "model.layers.0.mlp.up_proj.scales": {"dtype": "BF16", "shape": list(sc.shape), "data_offsets": [sc_off, bi_off]},
            "model.layers.0.mlp.up_proj.biases": {"dtype": "BF16", "shape": list(bi.shape), "data_offsets": [bi_off, bi_off + bi.nbytes]},
        }
        raw_safetensors(folder / "model.safetensors", entries, packed.tobytes() + sc.tobytes() + bi.tobytes())
        out = run_inspect(folder, "--tensors").stdout
        f = fields(out)
        assert f["quantization"] == f"mlx affine u{bits} group {group}"
        assert f["tensors"] == "1"
        typ, shape, _ = tensor_rows(out)["model.layers.0.mlp.up_proj.weight"]
        assert typ.startswith(f"MLX_AFFINE u{bits} g{group}") and shape == [cols, rows]
        got = dump(folder, "model.layers.0.mlp.up_proj.weight", tmp_path).reshape(rows, cols)
        assert np.array_equal(got, want), (bits, group)


def test_mlx_per_module_override_and_inconsistent_shapes(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 128)).astype(np.float32)
    packed, sc, bi, want = mlx_quantize(w, 8, 32)
    folder = tmp_path / "ov"
    folder.mkdir()
    cfg = dict(LLAMA_CONFIG, quantization={"group_size": 64, "bits": 3, "lm_head": {"group_size": 32, "bits": 8}})
    (folder / "config.json").write_text(json.dumps(cfg))
    o1, o2 = packed.nbytes, packed.nbytes + sc.nbytes
    entries = {
        "lm_head.weight": {"dtype": "U32", "shape": list(packed.shape), "data_offsets": [0, o1]},
        "lm_head.scales": {"dtype": "BF16", "shape": list(sc.shape), "data_offsets": [o1, o2]},
        "lm_head.biases": {"dtype": "BF16", "shape": list(bi.shape), "data_offsets": [o2, o2 + bi.nbytes]},
    }
    raw_safetensors(folder / "model.safetensors", entries, packed.tobytes() + sc.tobytes() + bi.tobytes())
    assert np.array_equal(dump(folder, "lm_head.weight", tmp_path).reshape(4, 128), want)
    # the same file under the 3-bit default no longer describes one matrix
    cfg["quantization"] = {"group_size": 64, "bits": 3}
    (folder / "config.json").write_text(json.dumps(cfg))
    p = run_inspect(folder, check=False)
    assert p.returncode == 1 and "error:" in p.stderr and "lm_head.weight" in p.stderr


# ---- damaged files ----------------------------------------------------------------------------------

def assert_clean_error(path, needle=None):
    p = run_inspect(path, check=False)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("error: "), p.stderr
    if needle:
        assert needle in p.stderr, p.stderr
    return p.stderr


def test_truncated_gguf_gives_clean_errors_at_every_cut(tmp_path):
    src = tmp_path / "ok.gguf"
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
    write_llama_gguf(src, [("a", x, None), ("b", quantize(x, T.Q8_0), T.Q8_0)],
                     {"t.nested": lambda w, k: w.add_array(k, [[1, 2], [3]])})
    data = src.read_bytes()
    cut = tmp_path / "cut.gguf"
    points = sorted(set(list(range(0, 200, 3)) + list(range(200, len(data), max(1, len(data) // 60)))))
    for n in points:
        if n >= len(data):
            continue
        cut.write_bytes(data[:n])
        assert_clean_error(cut)


def test_damaged_gguf_headers_are_refused_by_name(tmp_path):
    src = tmp_path / "ok.gguf"
    write_llama_gguf(src, [("a", np.ones((2, 32), np.float32), None)])
    data = bytearray(src.read_bytes())
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 1) + data[8:])
    assert_clean_error(bad, "version 1")
    bad.write_bytes(data[:8] + struct.pack("<Q", 1 << 60) + data[16:])
    assert_clean_error(bad, "cannot fit")
    bad.write_bytes(b"GGML" + data[4:])
    assert_clean_error(bad, "bad magic")
    # unknown tensor type id: patch the type field of the only tensor info
    info = bytes(data).find(struct.pack("<Q", 1) + b"a" + struct.pack("<I", 2))
    assert info > 0
    type_off = info + 8 + 1 + 4 + 16  # name, n_dims, ne[2]
    assert struct.unpack_from("<I", data, type_off)[0] == 0
    patched = bytearray(data)
    struct.pack_into("<I", patched, type_off, 77)
    bad.write_bytes(bytes(patched))
    assert_clean_error(bad, "type id 77")
    struct.pack_into("<I", patched, type_off, 16)
    bad.write_bytes(bytes(patched))
    assert_clean_error(bad, "IQ2_XXS")
    # offset past the end
    patched = bytearray(data)
    struct.pack_into("<Q", patched, type_off + 4, 1 << 20)
    bad.write_bytes(bytes(patched))
    assert_clean_error(bad, "past file size")
    bad.write_bytes(os.urandom(4096))
    assert_clean_error(bad)


def test_damaged_safetensors_are_refused_with_the_numbers(tmp_path):
    p = tmp_path / "bad.safetensors"
    good = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    raw_safetensors(p, good, bytes(16))
    run_inspect(p)
    data = p.read_bytes()
    for n in range(len(data)):
        p.write_bytes(data[:n])
        assert_clean_error(p)
    p.write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    assert_clean_error(p, "exceeds")
    p.write_bytes(struct.pack("<Q", 1000) + b"{}")
    assert_clean_error(p, "runs past file size")
    raw_safetensors(p, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 32]}}, bytes(16))
    assert_clean_error(p, "past file size")
    raw_safetensors(p, {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}}, bytes(24))
    assert_clean_error(p, "'w' is F32 [3, 2] = 24 bytes")
    raw_safetensors(p, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16))
    assert_clean_error(p, "overlap")
    raw_safetensors(p, {"w": {"dtype": "F33", "shape": [4], "data_offsets": [0, 16]}}, bytes(16))
    assert_clean_error(p, "unknown dtype 'F33'")
    raw_safetensors(p, {"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, bytes(16))
    assert_clean_error(p)
    p.write_bytes(struct.pack("<Q", 10) + b"{not json}")
    assert_clean_error(p, "invalid JSON")
    p.write_bytes(os.urandom(2048))
    assert_clean_error(p)


def test_sharded_index_naming_a_missing_tensor_is_an_error(tmp_path):
    folder = tmp_path / "sh"
    write_hf_folder(folder, LLAMA_CONFIG, {"a": np.ones(4, np.float32), "b": np.ones(2, np.float32)}, shards=2)
    idx = json.loads((folder / "model.safetensors.index.json").read_text())
    idx["weight_map"]["c"] = "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert_clean_error(folder, "'c'")
    idx["weight_map"]["c"] = "../escape.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert_clean_error(folder, "not a file name")


def test_unknown_architecture_lists_the_supported_ones(tmp_path):
    folder = tmp_path / "u"
    write_hf_folder(folder, dict(LLAMA_CONFIG, model_type="falcon"), {"a": np.ones(4, np.float32)})
    err = assert_clean_error(folder, "falcon")
    assert "qwen3_moe" in err and "gemma3" in err
    write_hf_folder(folder, {"model_type": "siglip_vision_model", "hidden_size": 8}, {"a": np.ones(4, np.float32)})
    assert_clean_error(folder, "vision")


# ---- mmap: opening a large file does not read it ----------------------------------------------------

def test_opening_a_sparse_1gb_file_does_not_read_it(tmp_path):
    p = tmp_path / "big.safetensors"
    n = 1 << 30
    header = json.dumps({"w": {"dtype": "F32", "shape": [n // 4], "data_offsets": [0, n]}}).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + n)  # sparse: no blocks written
    # The peak RSS of inspect alone: a forked child's peak starts at its parent's size (the fork
    # copies the accounting until exec), and this test process is large; so a fresh, bare
    # interpreter runs inspect and reports the peak of its only child.
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
             "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", probe, BIN, "inspect", str(p)],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert fields(out)["parameters"].startswith(str(n // 4))
    maxrss = int(out.rsplit("MAXRSS ", 1)[1])
    # reading 1 GiB would take the RSS past 1 GiB; the header alone is a few KiB
    assert maxrss < 200 * 1024, maxrss
    assert elapsed < 10


# ---- the real Gemma 3 270M GGUF -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma_gguf():
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"gemma3-270m not available: {p.stderr[-300:]}")
    return pathlib.Path(p.stdout.split()[-1])


def test_inspect_real_gemma3_270m_gguf(gemma_gguf, tmp_path):
    out = run_inspect(gemma_gguf, "--tensors").stdout
    f = fields(out)
    assert f["arch"] == "gemma3"
    assert f["layers"] == "18" and f["dim"] == "640" and f["head_dim"] == "256"
    assert f["tensors"] == "236"
    assert f["quantization"] == "gguf file_type 15 (Q4_K_M)"
    assert f["layer_kinds"] == "full 3, sliding 15 (window 512), linear 0"
    reader = gguf.GGUFReader(str(gemma_gguf))
    rows = tensor_rows(out)
    assert len(rows) == len(reader.tensors)
    done = set()
    for t in reader.tensors:
        typ = t.tensor_type.name
        assert rows[t.name][0] == typ and rows[t.name][1] == [int(s) for s in t.shape]
        assert rows[t.name][2] == int(t.data_offset)
        if typ not in done and t.n_elements <= 2_000_000:
            done.add(typ)
            want = dequantize(t.data, t.tensor_type).reshape(-1)
            assert bits_equal(want, dump(gemma_gguf, t.name, tmp_path)), t.name
    assert {"Q4_K", "Q5_0", "Q6_K", "F32"} <= done
    # per storage type: bytes and tensor counts as the reference reader sums them
    want_bytes, want_count = {}, {}
    for t in reader.tensors:
        typ = t.tensor_type.name
        want_bytes[typ] = want_bytes.get(typ, 0) + int(t.n_bytes)
        want_count[typ] = want_count.get(typ, 0) + 1
    got = {m[0]: (int(m[1]), int(m[2]))
           for m in re.findall(r"^bytes (\S+): (\d+) \(.*, (\d+) tensors\)$", out, re.M)}
    assert got == {k: (want_bytes[k], want_count[k]) for k in want_bytes}
    assert int(f["cpu_load_bytes"].split()[0]) == sum(want_bytes.values())


# (a folder without weights, such as llm_reranker, borrows another fixture's at test time)
FIXTURES = sorted(p for p in (pathlib.Path(__file__).resolve().parents[1] / "fixtures").iterdir()
                  if (p / "config.json").is_file() and (p / "model.safetensors").is_file())


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_inspect_every_fixture_matches_its_config_and_weights(fixture):
    """inspect reads each transformers-made fixture: architecture and sizes from its config.json,
    exactly the tensors of model.safetensors (ref.safetensors beside it is not a weight file)."""
    from safetensors import safe_open
    cfg = json.loads((fixture / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    out = run_inspect(fixture, "--tensors").stdout
    f = fields(out)
    assert f["arch"] == cfg["model_type"]
    assert f["format"] == "safetensors (1 file)"
    with safe_open(str(fixture / "model.safetensors"), "np") as st:
        names = set(st.keys())
    listed = set(tensor_rows(out))
    # MLX triples fold into one weight: scales/biases are companions of W.weight
    assert {n for n in names if not n.endswith((".scales", ".biases"))} <= listed | {
        n for n in names if n.endswith(".weight") and n[:-7] + ".scales" in names}
    if "vocab_size" in text:
        assert int(f["vocab"]) == text["vocab_size"]
    layers = text.get("num_hidden_layers", text.get("decoder_layers"))
    if layers is not None and "layers" in f:
        assert int(f["layers"]) == layers
