"""Checks of the reference fixtures under tests/fixtures (built by tools/make_fixtures.py).

Runs without torch: numpy, json and a small safetensors reader. For every fixture directory it checks that
the files parse, the reference shapes agree with the config, the weight shapes agree with the config
dimensions, MLX-quantized variants are laid out consistently, the reference is finite and not near-uniform,
and that the greedy tokens follow from the stored logits. For the dense llama-style families it also runs an
independent float64 numpy forward on the stored weights (dequantizing MLX variants) and requires the stored
logits and greedy tokens to follow from the stored weights.
"""

import hashlib
import json
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
GREEDY_LEN = 12
_NP = {"F32": np.float32, "I32": np.int32, "U32": np.uint32, "BF16": np.uint16, "I64": np.int64,
       "F16": np.float16}


def fixture_dirs():
    if not ROOT.is_dir():
        return []
    return sorted(
        d for d in ROOT.iterdir()
        if d.is_dir() and any((d / f).exists() for f in ("ref.safetensors", "model.safetensors"))
    )


def read_safetensors(path):
    """-> ({name: (dtype tag, numpy array)}, metadata). BF16 comes back as float32 (exact)."""
    raw = Path(path).read_bytes()
    assert len(raw) >= 8, f"{path}: shorter than the header length"
    (hlen,) = struct.unpack("<Q", raw[:8])
    assert 8 + hlen <= len(raw), f"{path}: header length {hlen} past end of file"
    header = json.loads(raw[8 : 8 + hlen])
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + hlen :]
    out, spans = {}, []
    for name, info in header.items():
        tag, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        assert tag in _NP, f"{path}: tensor {name} has unexpected dtype {tag}"
        count = math.prod(shape)
        assert 0 <= b <= e <= len(data), f"{path}: tensor {name} data [{b}, {e}) outside the file"
        assert e - b == count * np.dtype(_NP[tag]).itemsize, f"{path}: tensor {name} byte size mismatch"
        arr = np.frombuffer(data, dtype=np.dtype(_NP[tag]).newbyteorder("<"), count=count, offset=b)
        arr = arr.reshape(shape)
        if tag == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = (tag, arr)
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:  # the format requires the data to be covered exactly, without holes or overlaps
        assert b == pos, f"{path}: hole or overlap in tensor data at byte {pos}"
        pos = e
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes after the tensor data"
    return out, meta


def unpack_codes(words, bits, n):
    """uint32 [rows, n*bits/32] -> codes uint32 [rows, n]; code j sits at bit j*bits of the row stream.
    Read through a 64-bit window so codes may straddle two words (3/5/6-bit layouts)."""
    w = words.astype(np.uint64)
    w = np.concatenate([w, np.zeros((w.shape[0], 1), dtype=np.uint64)], axis=1)
    pos = np.arange(n, dtype=np.uint64) * np.uint64(bits)
    idx = (pos // np.uint64(32)).astype(np.int64)
    shift = pos % np.uint64(32)
    window = w[:, idx] | (w[:, idx + 1] << np.uint64(32))
    return ((window >> shift) & np.uint64((1 << bits) - 1)).astype(np.uint32)


class Fixture:
    def __init__(self, d):
        self.dir = d
        self.name = d.name
        self.config = json.loads((d / "config.json").read_text())
        self.weights, _ = read_safetensors(d / "model.safetensors")
        self.ref, self.meta = read_safetensors(d / "ref.safetensors")
        self.quant = self.config.get("quantization")
        mt = self.config.get("model_type", "")
        self.kind = ("whisper" if mt == "whisper" else "bert" if mt in ("bert", "xlm-roberta", "roberta", "mpnet")
                     else "causal")
        if any(a.endswith("ForSequenceClassification") for a in self.config.get("architectures", [])):
            self.kind = "cross_encoder"
        if self.config.get("use_bidirectional_attention"):
            self.kind = "embedder"  # EmbeddingGemma: a decoder stack pooled by sentence-transformers' modules

    def r(self, name):
        assert name in self.ref, f"{self.name}: ref.safetensors lacks '{name}'"
        return self.ref[name][1]

    def logical(self):
        """{name: (logical shape, dequantized float32 or None for integer tensors)} (MLX triples merged)."""
        out = {}
        for name, (tag, arr) in self.weights.items():
            if name.endswith(".scales") or name.endswith(".biases"):
                continue
            if tag == "U32":
                stem = name[: -len(".weight")]
                bits, g = self.quant["bits"], self.quant["group_size"]
                n = arr.shape[1] * 32 // bits
                q = unpack_codes(arr, bits, n).astype(np.float32).reshape(arr.shape[0], n // g, g)
                s = self.weights[stem + ".scales"][1][..., None]
                b = self.weights[stem + ".biases"][1][..., None]
                deq = (s * q).astype(np.float32) + b  # float32 product then float32 sum, as the reference
                out[name] = ((arr.shape[0], n), deq.reshape(arr.shape[0], n).astype(np.float32))
            else:
                out[name] = (arr.shape, arr)
        return out


_CACHE = {}


def load(d):
    if d not in _CACHE:
        _CACHE[d] = Fixture(d)
    return _CACHE[d]


DIRS = fixture_dirs()


def test_fixture_set_is_not_empty():
    assert DIRS, f"no fixture directories under {ROOT}: run tools/make_fixtures.py --out tests/fixtures"


def test_manifest_lists_every_fixture_with_matching_hashes():
    manifest = json.loads((ROOT / "MANIFEST.json").read_text())
    for d in DIRS:
        assert d.name in manifest, f"{d.name} is missing from MANIFEST.json"
        files = sorted(p.name for p in d.iterdir() if p.is_file())
        assert files == sorted(manifest[d.name]), f"{d.name}: files {files} differ from the manifest"
        for f in files:
            digest = hashlib.sha256((d / f).read_bytes()).hexdigest()
            assert digest == manifest[d.name][f], f"{d.name}/{f} changed since it was generated"


@pytest.fixture(params=DIRS, ids=[d.name for d in DIRS])
def fx(request):
    return load(request.param)


def test_files_parse_and_weights_are_finite(fx):
    assert {"config.json", "model.safetensors", "ref.safetensors"} <= {p.name for p in fx.dir.iterdir()}
    assert isinstance(fx.config.get("model_type"), str)
    assert fx.weights, "model.safetensors holds no tensors"
    for name, (tag, arr) in fx.weights.items():
        if (fx.quant and tag == "U32") or (tag == "I64" and name.endswith("position_ids")):
            continue
        assert tag == "BF16", f"{name}: stored as {tag}, fixtures store weights in bf16"
        assert np.all(np.isfinite(arr)), f"{name}: non-finite weight"
    for name, (tag, arr) in fx.ref.items():
        if tag == "F32":
            assert np.all(np.isfinite(arr)), f"ref {name}: non-finite value"


def _hidden(cfg):
    return cfg.get("hidden_size") or cfg.get("d_model")


def test_weight_shapes_agree_with_config(fx):
    cfg, shapes = fx.config, {k: v[0] for k, v in fx.logical().items()}
    hidden, vocab = _hidden(cfg), cfg["vocab_size"]
    emb = [k for k in shapes if re.search(r"(^|\.)(embed_tokens|word_embeddings)\.weight$", k)]
    assert emb, "no token embedding tensor"
    for k in emb:
        assert tuple(shapes[k]) == (vocab, hidden), f"{k}: {shapes[k]} != [vocab {vocab}, hidden {hidden}]"
    if "lm_head.weight" in shapes:
        assert tuple(shapes["lm_head.weight"]) == (vocab, hidden)
    for name, shape in shapes.items():
        if len(shape) < 2 or name.endswith("position_ids"):
            continue
        if "embed_tokens_per_layer" in name:
            want = (cfg["vocab_size_per_layer_input"], cfg["num_hidden_layers"] * cfg["hidden_size_per_layer_input"])
            assert tuple(shape) == want, f"{name}: {shape} != {want}"
        elif name.endswith("conv1d.weight"):
            assert tuple(shape[1:]) == (1, cfg["linear_conv_kernel_dim"]), f"{name}: {shape}"
        else:
            heads = (cfg["num_attention_heads"],) if name.endswith("relative_attention_bias.weight") else ()
            assert hidden in shape or shape in [(32, h) for h in heads], f"{name}: shape {shape} has no dimension equal to hidden size {hidden}"
    # layer indices cover exactly range(num_layers), per stack
    stacks = {}
    for name in shapes:
        m = re.search(r"(?:^|\.)(?:(encoder|decoder)\.)?layers?\.(\d+)\.", name)
        if m:
            stacks.setdefault(m.group(1) or "", set()).add(int(m.group(2)))
    if fx.kind == "whisper":
        want = {"encoder": cfg["encoder_layers"], "decoder": cfg["decoder_layers"]}
    elif fx.kind in ("bert", "cross_encoder"):
        want = {"encoder": cfg["num_hidden_layers"]}
    else:
        want = {"": cfg["num_hidden_layers"]}
    assert {k: sorted(v) for k, v in stacks.items()} == {k: list(range(n)) for k, n in want.items()}
    # expert counts
    if cfg.get("num_experts"):
        e = cfg["num_experts"]
        per = {int(m.group(1)) for k in shapes for m in [re.search(r"\.experts\.(\d+)\.", k)] if m}
        fused = [k for k in shapes if re.search(r"\.experts\.(gate_up_proj|down_proj)$", k)]
        assert per or fused, "MoE config but no expert tensors"
        if per:
            assert per == set(range(e)), f"expert indices {sorted(per)} != range({e})"
        for k in fused:
            assert shapes[k][0] == e, f"{k}: {shapes[k]} does not start with {e} experts"
    # attention projections of the llama-style families
    if cfg["model_type"] in ("llama", "mistral", "qwen2", "qwen3"):
        hd = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
        h, kv, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            assert tuple(shapes[p + "self_attn.q_proj.weight"]) == (h * hd, hidden)
            assert tuple(shapes[p + "self_attn.k_proj.weight"]) == (kv * hd, hidden)
            assert tuple(shapes[p + "self_attn.v_proj.weight"]) == (kv * hd, hidden)
            assert tuple(shapes[p + "self_attn.o_proj.weight"]) == (hidden, h * hd)
            assert tuple(shapes[p + "mlp.gate_proj.weight"]) == (inter, hidden)
            assert tuple(shapes[p + "mlp.down_proj.weight"]) == (hidden, inter)


def test_mlx_variants_are_consistent(fx):
    if not fx.quant:
        assert not any(t == "U32" for t, _ in fx.weights.values()), "packed weights without a quantization entry"
        return
    bits, g = fx.quant["bits"], fx.quant["group_size"]
    assert fx.config.get("quantization_config", fx.quant) == fx.quant
    packed = [k for k, (t, _) in fx.weights.items() if t == "U32"]
    assert packed, "quantized config but no packed weights"
    assert any(k.endswith("embed_tokens.weight") for k in packed), "the embedding is not quantized"
    for k in packed:
        assert k.endswith(".weight"), k
        stem, words = k[: -len(".weight")], fx.weights[k][1]
        n = words.shape[1] * 32 // bits
        assert words.shape[1] * 32 % bits == 0 and n % g == 0, f"{k}: {words.shape} for {bits} bits, group {g}"
        for part in ("scales", "biases"):
            tag, arr = fx.weights[f"{stem}.{part}"]
            assert tag == "BF16" and arr.shape == (words.shape[0], n // g), f"{stem}.{part}: {tag} {arr.shape}"
        assert np.all(fx.weights[stem + ".scales"][1] > 0), f"{stem}: non-positive scale"
        codes = unpack_codes(words, bits, n)
        # min/max affine quantization: every group's codes use most of the range
        spread = codes.reshape(len(codes), -1, g)
        assert (spread.max(-1) - spread.min(-1)).min() >= (1 << bits) // 2, f"{k}: codes barely spread"
    for k, (t, _) in fx.weights.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            assert k.rsplit(".", 1)[0] + ".weight" in packed, f"{k} without its packed weight"


def _assert_not_uniform(logits, what):
    std = logits.std(axis=-1)
    assert std.min() > 0.5, f"{what}: near-uniform logits (min std over vocab {std.min():.3g})"


def test_reference_shapes_agree_with_config(fx):
    cfg = fx.config
    vocab = cfg["vocab_size"]
    if fx.kind == "bert":
        ids, mask, hidden = fx.r("input_ids"), fx.r("attention_mask"), fx.r("last_hidden_state")
        t = ids.shape[0]
        assert ids.dtype == np.int32 and mask.dtype == np.int32 and ids.shape == mask.shape == (t,)
        assert 4 <= t <= 48 and ids.min() >= 0 and ids.max() < vocab
        assert set(mask.tolist()) == {0, 1}, "mask should have real and padded positions"
        assert hidden.shape == (t, cfg["hidden_size"]) and fx.r("pooled").shape == (cfg["hidden_size"],)
        m = mask.astype(np.float64)[:, None]
        want = (hidden.astype(np.float64) * m).sum(0) / m.sum()
        np.testing.assert_allclose(fx.r("pooled"), want, rtol=1e-5, atol=1e-6)
        assert hidden.std(axis=-1).min() > 0.1
        return
    if fx.kind == "cross_encoder":
        # sentence-transformers' CrossEncoder scores: sigmoid of the one-label head's logit
        scores, logits = fx.r("scores").astype(np.float64), fx.r("logits").astype(np.float64)
        assert scores.shape == logits.shape and scores.ndim == 1 and len(scores) >= 4
        np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits)), rtol=1e-6)
        assert scores.max() - scores.min() > 0.05, "scores should spread"
        return
    if fx.kind == "embedder":
        # sentence-transformers' embeddings after the folder's Dense modules and Normalize
        emb = [fx.r(k) for k in ("alone", "batch", "prompted")]
        assert all(e.dtype == np.float32 and e.ndim == 2 and e.shape == emb[0].shape for e in emb)
        assert len(emb[0]) >= 8
        for e in emb:
            np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
        np.testing.assert_allclose(emb[0], emb[1], atol=1e-5)  # alone or padded in a batch
        return
    if fx.kind == "whisper":
        feats, enc = fx.r("input_features"), fx.r("encoder_output")
        assert feats.shape == (cfg["num_mel_bins"], 2 * cfg["max_source_positions"])
        assert enc.shape == (cfg["max_source_positions"], cfg["d_model"])
        ids = fx.r("decoder_input_ids")
        assert ids[0] == cfg["decoder_start_token_id"]
    else:
        ids = fx.r("input_ids")
        assert 8 <= ids.shape[0] <= 16, f"prompt length {ids.shape[0]}"
    logits, greedy = fx.r("logits"), fx.r("greedy")
    assert ids.dtype == np.int32 and ids.ndim == 1 and ids.min() >= 0 and ids.max() < vocab
    assert logits.dtype == np.float32 and logits.shape == (ids.shape[0], vocab)
    assert greedy.dtype == np.int32 and greedy.shape == (GREEDY_LEN,)
    assert greedy.min() >= 0 and greedy.max() < vocab
    _assert_not_uniform(logits, fx.name)
    # the first greedy token is the argmax of the last prompt position, clearly ahead of the runner-up
    top2 = np.sort(logits[-1])[-2:]
    assert greedy[0] == int(np.argmax(logits[-1])), "greedy[0] is not the argmax of the last logits row"
    assert top2[1] - top2[0] > 1e-3, "first greedy step is a near-tie"
    margins = fx.r("greedy_margins")
    assert margins.shape == (GREEDY_LEN,) and margins.min() > 1e-3
    assert abs(float(margins[0]) - float(top2[1] - top2[0])) < 1e-4


# ---------------------------------------------------------------------------------------------------
# Independent float64 forward for the dense llama-style families (llama, mistral, qwen2, qwen3).

LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3")


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _inv_freq(cfg, hd):
    rope = cfg.get("rope_parameters") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    if rope.get("rope_type") == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = np.where(wavelen > old / lo, inv / factor, (1 - smooth) * inv / factor + smooth * inv)
        inv = np.where(wavelen < old / hi, inv, scaled)
    else:
        assert rope.get("rope_type", "default") == "default", f"rope type {rope.get('rope_type')} not modelled"
    return inv


def _rope(x, pos, inv):
    # x [heads, T, hd]; the two halves of each head form the rotated pairs
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def llama_forward(cfg, W, ids):
    hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    h_n, kv_n = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or hidden // h_n
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    inv = _inv_freq(cfg, hd)
    mask = np.triu(np.full((t, t), -np.inf), 1)
    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = _rms(x, W[p + "input_layernorm.weight"], eps)

        def proj(n, a=a, p=p):
            y = a @ W[p + f"self_attn.{n}_proj.weight"].T
            return y + W[p + f"self_attn.{n}_proj.bias"] if p + f"self_attn.{n}_proj.bias" in W else y

        q = proj("q").reshape(t, h_n, hd).transpose(1, 0, 2)
        k = proj("k").reshape(t, kv_n, hd).transpose(1, 0, 2)
        v = proj("v").reshape(t, kv_n, hd).transpose(1, 0, 2)
        if p + "self_attn.q_norm.weight" in W:
            q = _rms(q, W[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = _rope(q, pos, inv), _rope(k, pos, inv)
        rep = h_n // kv_n
        k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(t, h_n * hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        m = _rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = m @ W[p + "mlp.gate_proj.weight"].T, m @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = _rms(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.T


def test_llama_style_reference_follows_from_stored_weights(fx):
    cfg = fx.config
    if cfg["model_type"] not in LLAMA_STYLE:
        pytest.skip("independent numpy forward covers the dense llama-style families only")
    if cfg["model_type"] == "qwen2" and cfg.get("use_sliding_window"):
        pytest.skip("sliding-window qwen2 not modelled")
    assert cfg.get("sliding_window") in (None, 0) or cfg["sliding_window"] >= 64, "sliding window not modelled"
    W = {k: v.astype(np.float64) for k, (_, v) in fx.logical().items()}
    ids = fx.r("input_ids").astype(np.int64)
    logits = llama_forward(cfg, W, ids)
    ref = fx.r("logits").astype(np.float64)
    err = np.abs(logits - ref).max()
    assert err < 2e-3 * max(1.0, np.abs(ref).max()), f"numpy forward differs from the stored logits by {err:.3g}"
    seq = list(ids)
    for step, want in enumerate(fx.r("greedy")):
        seq.append(int(np.argmax(llama_forward(cfg, W, np.array(seq))[-1])))
        assert seq[-1] == want, f"greedy step {step}: numpy forward picks {seq[-1]}, reference {want}"
