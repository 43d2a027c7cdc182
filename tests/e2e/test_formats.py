"""Weight formats against the reference writers and dequantizers.

The Python `gguf` package (GGUFWriter, gguf.quants) and the `safetensors` package write the
files; the C side is reached through libsaragossa.so (reference dequantizers) and the
`saragossa inspect` CLI. Values are compared bit for bit.
"""
import ctypes
import os
import pathlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize, quantize  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("SARAGOSSA_BIN", str(ROOT / "build" / "saragossa"))
LIB = ROOT / "build" / "libsaragossa.so"
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
        pytest.skip("build/libsaragossa.so not built")
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
