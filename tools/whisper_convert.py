#!/usr/bin/env python3
"""Rewrites a Whisper model from one layout into another (numpy only, no torch):

  whisper_convert.py hf   SRC OUT_DIR   a Hugging Face folder transformers' WhisperForConditionalGeneration
                                        loads: config.json, generation_config.json (alignment heads),
                                        model.safetensors (the weights' own float type), tokenizer.json
  whisper_convert.py ct2  SRC OUT_DIR [int8]
                                        a CTranslate2 folder (model.bin, WhisperSpec revision 3, as
                                        CTranslate2's converter names and fuses the variables; float32,
                                        or int8 matrices with one float32 scale per row: W ~ q / scale)
  whisper_convert.py ggml SRC OUT.bin   whisper.cpp's ggml .bin: hparams, the Slaney mel filterbank,
                                        the byte-level vocabulary, then the tensors under whisper.cpp's
                                        names (matrices F16, vectors, conv biases and positions F32)
  whisper_convert.py mlx  SRC OUT_DIR [float16|float32] [npz|safetensors] [q4|q8]
                                        an MLX folder as mlx-examples' whisper converter writes it:
                                        config.json (openai-whisper's ModelDimensions, "quantization"
                                        when quantized), weights.npz (np.savez, its default) or
                                        weights.safetensors; openai-whisper's names with mlp1/mlp2,
                                        conv weights [out][k][in], no encoder positions, the
                                        alignment heads as an int64 [n][2] tensor; q4/q8: every
                                        Linear and the token embedding MLX affine, group 64, as
                                        mlx.nn.quantize computes it (default float16 npz)

SRC is a CTranslate2 Whisper folder (model.bin + config.json + tokenizer.json, as faster-whisper
ships it) or a Hugging Face Whisper folder (config.json + model.safetensors).

CTranslate2 fuses self-attention's q, k, v into one matrix and cross-attention's k, v into another;
they are split back. CTranslate2 also stores a bias for k (zeros from the converters); Hugging Face
Whisper has none. A bias on k adds one constant to every logit of a query, which the softmax
cancels, so leaving it out changes nothing.
"""
import json
import pathlib
import shutil
import struct
import sys

import numpy as np

CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bf16"}


def read_ct2(path):
    b = pathlib.Path(path).read_bytes()
    o = 0

    def u(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, b, o)
        o += struct.calcsize("<" + fmt)
        return v[0]

    def s():
        nonlocal o
        n = u("H")
        v = b[o:o + n - 1].decode()
        o += n
        return v

    version = u("I")
    assert version == 6, f"model.bin binary version {version}"
    spec, _rev = s(), u("I")
    assert spec == "WhisperSpec", spec
    out = {}
    for _ in range(u("I")):
        name = s()
        rank = u("B")
        shape = [u("I") for _ in range(rank)]
        dt, nbytes = u("B"), u("I")
        raw = b[o:o + nbytes]
        o += nbytes
        if CT2_DTYPES[dt] == "bf16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=CT2_DTYPES[dt])
        out[name] = a.reshape(shape)
    for _ in range(u("I")):
        alias, target = s(), s()
        out[alias] = out[target]
    for name in [n for n in out if n.endswith("_scale")]:
        base = name[:-len("_scale")]
        if base in out and out[base].dtype in (np.int8, np.int16):
            sc = out[name].astype(np.float32)
            out[base] = (out[base].astype(np.float32) / (sc[:, None] if sc.ndim == 1 else sc)).astype(np.float32)
    return out


def read_safetensors(path):
    b = pathlib.Path(path).read_bytes()
    n = struct.unpack_from("<Q", b)[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype={"F32": np.float32, "F16": np.float16}[v["dtype"]])
        out[k] = a.reshape(v["shape"])
    return out


def write_safetensors(path, tensors, metadata=None):
    h, off, blobs = {}, 0, []
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}[a.dtype]
        h[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    if metadata:
        h["__metadata__"] = metadata
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for x in blobs:
            f.write(x)


def ct2_to_hf_state(v):
    """transformers' state dict (numpy) and its config from CTranslate2 variables."""
    d = v["decoder/embeddings/weight"].shape[1]
    st = {}

    def attn(dst, src, fused, cross):
        if cross:
            st[f"{dst}.q_proj.weight"] = v[f"{src}/linear_0/weight"]
            st[f"{dst}.q_proj.bias"] = v[f"{src}/linear_0/bias"]
            kv, kvb = v[f"{src}/linear_1/weight"], v[f"{src}/linear_1/bias"]
            st[f"{dst}.k_proj.weight"], st[f"{dst}.v_proj.weight"] = kv[:d], kv[d:]
            st[f"{dst}.v_proj.bias"] = kvb[d:]
            out = "linear_2"
        else:
            w, b = v[f"{src}/linear_0/weight"], v[f"{src}/linear_0/bias"]
            st[f"{dst}.q_proj.weight"], st[f"{dst}.k_proj.weight"], st[f"{dst}.v_proj.weight"] = w[:d], w[d:2 * d], w[2 * d:]
            st[f"{dst}.q_proj.bias"], st[f"{dst}.v_proj.bias"] = b[:d], b[2 * d:]
            out = "linear_1"
        st[f"{dst}.out_proj.weight"] = v[f"{src}/{out}/weight"]
        st[f"{dst}.out_proj.bias"] = v[f"{src}/{out}/bias"]

    def norm(dst, src):
        st[f"{dst}.weight"], st[f"{dst}.bias"] = v[f"{src}/gamma"], v[f"{src}/beta"]

    def ffn(dst, src):
        st[f"{dst}.fc1.weight"], st[f"{dst}.fc1.bias"] = v[f"{src}/ffn/linear_0/weight"], v[f"{src}/ffn/linear_0/bias"]
        st[f"{dst}.fc2.weight"], st[f"{dst}.fc2.bias"] = v[f"{src}/ffn/linear_1/weight"], v[f"{src}/ffn/linear_1/bias"]
        norm(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")

    n_enc = sum(1 for k in v if k.startswith("encoder/layer_") and k.endswith("/ffn/linear_0/weight"))
    n_dec = sum(1 for k in v if k.startswith("decoder/layer_") and k.endswith("/ffn/linear_0/weight"))
    for c in ("conv1", "conv2"):
        st[f"model.encoder.{c}.weight"], st[f"model.encoder.{c}.bias"] = v[f"encoder/{c}/weight"], v[f"encoder/{c}/bias"]
    st["model.encoder.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    for i in range(n_enc):
        p, s = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        norm(f"{p}.self_attn_layer_norm", f"{s}/self_attention/layer_norm")
        attn(f"{p}.self_attn", f"{s}/self_attention", True, False)
        ffn(p, s)
    norm("model.encoder.layer_norm", "encoder/layer_norm")
    st["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    st["model.decoder.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    for i in range(n_dec):
        p, s = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        norm(f"{p}.self_attn_layer_norm", f"{s}/self_attention/layer_norm")
        attn(f"{p}.self_attn", f"{s}/self_attention", True, False)
        norm(f"{p}.encoder_attn_layer_norm", f"{s}/attention/layer_norm")
        attn(f"{p}.encoder_attn", f"{s}/attention", False, True)
        ffn(p, s)
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    vocab = v["decoder/embeddings/weight"].shape[0]
    cfg = {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "vocab_size": int(vocab), "num_mel_bins": int(v["encoder/conv1/weight"].shape[1]), "d_model": int(d),
        "encoder_layers": n_enc, "decoder_layers": n_dec,
        "encoder_attention_heads": int(v["encoder/num_heads"]), "decoder_attention_heads": int(v["decoder/num_heads"]),
        "encoder_ffn_dim": int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_ffn_dim": int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "max_source_positions": int(v["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(v["decoder/position_encodings/encodings"].shape[0]),
        "activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": True,
        # tiny.en's ids (multilingual models shift them by one)
        "bos_token_id": 50257, "eos_token_id": 50256, "pad_token_id": 50256, "decoder_start_token_id": 50257,
    }
    if vocab >= 51865:
        cfg.update(bos_token_id=50257, eos_token_id=50257, pad_token_id=50257, decoder_start_token_id=50258)
    return st, cfg


def load_any(src):
    src = pathlib.Path(src)
    if (src / "model.bin").exists():
        st, cfg = ct2_to_hf_state(read_ct2(src / "model.bin"))
        ct2cfg = json.loads((src / "config.json").read_text()) if (src / "config.json").exists() else {}
        return st, cfg, ct2cfg.get("alignment_heads")
    cfg = json.loads((src / "config.json").read_text())
    gp = src / "generation_config.json"
    heads = json.loads(gp.read_text()).get("alignment_heads") if gp.exists() else None
    return read_safetensors(src / "model.safetensors"), cfg, heads


def to_hf(src, out):
    st, cfg, heads = load_any(src)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = {"decoder_start_token_id": cfg["decoder_start_token_id"], "eos_token_id": cfg["eos_token_id"],
           "bos_token_id": cfg["bos_token_id"], "pad_token_id": cfg["pad_token_id"], "max_length": cfg["max_target_positions"]}
    if heads:
        gen["alignment_heads"] = heads
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    write_safetensors(out / "model.safetensors", {k: a for k, a in st.items()}, {"format": "pt"})
    tok = pathlib.Path(src) / "tokenizer.json"
    if tok.exists():
        shutil.copy(tok, out / "tokenizer.json")


def hz_to_mel(f):
    """Slaney's mel scale (linear below 1 kHz, logarithmic above), as librosa's htk=False."""
    f = np.asarray(f, dtype=np.float64)
    mels = f / (200.0 / 3)
    log_t = f >= 1000.0
    return np.where(log_t, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mels)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), (200.0 / 3) * m)


def mel_filters(n_mels, n_fft=400, rate=16000):
    """[n_mels][n_fft/2 + 1] triangular filters, Slaney area normalisation (Whisper's)."""
    fft_f = np.linspace(0, rate / 2, n_fft // 2 + 1)
    pts = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(rate / 2), n_mels + 2))
    fd = np.diff(pts)
    ramps = pts[:, None] - fft_f[None, :]
    lower, upper = -ramps[:-2] / fd[:-1, None], ramps[2:] / fd[1:, None]
    w = np.maximum(0.0, np.minimum(lower, upper))
    w *= (2.0 / (pts[2:n_mels + 2] - pts[:n_mels]))[:, None]
    return w.astype(np.float32)


def byte_decoder():
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest map to 256+."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


GGML_NAMES = [  # Hugging Face layer stem -> whisper.cpp's
    ("self_attn.q_proj", "attn.query"), ("self_attn.k_proj", "attn.key"), ("self_attn.v_proj", "attn.value"),
    ("self_attn.out_proj", "attn.out"), ("self_attn_layer_norm", "attn_ln"),
    ("encoder_attn.q_proj", "cross_attn.query"), ("encoder_attn.k_proj", "cross_attn.key"),
    ("encoder_attn.v_proj", "cross_attn.value"), ("encoder_attn.out_proj", "cross_attn.out"),
    ("encoder_attn_layer_norm", "cross_attn_ln"), ("fc1", "mlp.0"), ("fc2", "mlp.2"), ("final_layer_norm", "mlp_ln"),
]
GGML_TOP = {
    "encoder.layer_norm.weight": "encoder.ln_post.weight", "encoder.layer_norm.bias": "encoder.ln_post.bias",
    "encoder.embed_positions.weight": "encoder.positional_embedding",
    "decoder.embed_positions.weight": "decoder.positional_embedding",
    "decoder.layer_norm.weight": "decoder.ln.weight", "decoder.layer_norm.bias": "decoder.ln.bias",
    "decoder.embed_tokens.weight": "decoder.token_embedding.weight",
}
F32_NAMES = {"encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding", "decoder.positional_embedding"}


def ggml_name(hf):
    n = hf[len("model."):]
    if n in GGML_TOP:
        return GGML_TOP[n]
    parts = n.split(".")
    if parts[1] == "layers":
        stem, last = ".".join(parts[3:-1]), parts[-1]
        return ".".join([parts[0], "blocks", parts[2], dict(GGML_NAMES)[stem], last])
    return n


def to_ggml(src, out, f16=True):
    st, cfg, _ = load_any(src)
    tok_path = pathlib.Path(src) / "tokenizer.json"
    vocab = json.loads(tok_path.read_text())["model"]["vocab"] if tok_path.exists() else {}
    dec = byte_decoder()
    with open(out, "wb") as f:
        f.write(struct.pack("<i", 0x67676D6C))
        for key in ("vocab_size", "max_source_positions", "d_model", "encoder_attention_heads", "encoder_layers",
                    "max_target_positions", "d_model", "decoder_attention_heads", "decoder_layers", "num_mel_bins"):
            f.write(struct.pack("<i", int(cfg[key])))
        f.write(struct.pack("<i", 1 if f16 else 0))
        filt = mel_filters(int(cfg["num_mel_bins"]))
        f.write(struct.pack("<ii", *filt.shape))
        f.write(filt.astype("<f4").tobytes())
        toks = sorted(vocab.items(), key=lambda kv: kv[1])
        f.write(struct.pack("<i", len(toks)))
        for text, _ in toks:
            raw = bytes(dec[c] for c in text)
            f.write(struct.pack("<i", len(raw)))
            f.write(raw)
        for hf, a in st.items():
            name = ggml_name(hf)
            a = np.asarray(a, dtype=np.float32)
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                a = a.reshape(a.shape[0], 1)
            use16 = f16 and a.ndim >= 2 and name not in F32_NAMES
            a = a.astype("<f2" if use16 else "<f4")
            nb = name.encode()
            f.write(struct.pack("<iii", a.ndim, len(nb), 1 if use16 else 0))
            for dim in reversed(a.shape):
                f.write(struct.pack("<i", dim))
            f.write(nb)
            f.write(a.tobytes())


MLX_DTYPES = {"float16": np.float16, "float32": np.float32}


def mlx_name(hf):
    """openai-whisper's parameter name (mlx_whisper's: mlp.0 / mlp.2 are mlp1 / mlp2)."""
    return ggml_name(hf).replace(".mlp.0.", ".mlp1.").replace(".mlp.2.", ".mlp2.")


def mlx_quantize(w, group, bits):
    """MLX's affine quantization of a [rows][cols] float matrix, as mlx.core.quantize computes
    it: per group of `group` columns, the edge (the minimum when it is the larger in magnitude,
    else the maximum) is made exactly representable; q = round((w - bias) / scale) in [0, 2^bits
    - 1], packed little-endian into uint32 words; scales and biases in w's type."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group).astype(np.float32)
    wmax, wmin = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    nb = np.float32((1 << bits) - 1)
    neg = np.abs(wmin) > np.abs(wmax)
    scales = np.maximum((wmax - wmin) / nb, np.float32(1e-7))
    scales = np.where(neg, scales, -scales)
    edge = np.where(neg, wmin, wmax)
    q0 = np.round(edge / scales)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales)
    biases = np.where(q0 == 0, np.float32(0), edge)
    q = np.clip(np.round((g - biases) / scales), 0, nb).astype(np.uint32).reshape(rows, cols // (32 // bits), 32 // bits)
    packed = np.zeros(q.shape[:2], np.uint32)
    for i in range(32 // bits):
        packed |= q[:, :, i] << np.uint32(bits * i)
    return packed, scales.reshape(rows, -1).astype(w.dtype), biases.reshape(rows, -1).astype(w.dtype)


def mlx_state(src, dtype="float16", bits=None, group=64):
    """(config, {name: array}) of the MLX folder made from src."""
    st, cfg, heads = load_any(src)
    dt = MLX_DTYPES[dtype]
    out = {}
    for hf, a in st.items():
        name = mlx_name(hf)
        if name == "encoder.positional_embedding":
            continue  # mlx_whisper makes the sinusoids itself
        a = np.asarray(a, dtype=np.float32)
        if name in ("encoder.conv1.weight", "encoder.conv2.weight"):
            a = a.transpose(0, 2, 1)  # [out][in][k] -> MLX's [out][k][in]
        out[name] = np.ascontiguousarray(a.astype(dt))
    n_layer, n_head = int(cfg["decoder_layers"]), int(cfg["decoder_attention_heads"])
    if not heads:  # openai-whisper's default: every head of the last half of the decoder layers
        heads = [[L, h] for L in range(n_layer // 2, n_layer) for h in range(n_head)]
    out["alignment_heads"] = np.array(sorted(tuple(x) for x in heads), dtype=np.int64).reshape(-1, 2)
    dims = {
        "n_mels": int(cfg["num_mel_bins"]), "n_audio_ctx": int(cfg["max_source_positions"]),
        "n_audio_state": int(cfg["d_model"]), "n_audio_head": int(cfg["encoder_attention_heads"]),
        "n_audio_layer": int(cfg["encoder_layers"]), "n_vocab": int(cfg["vocab_size"]),
        "n_text_ctx": int(cfg["max_target_positions"]), "n_text_state": int(cfg["d_model"]),
        "n_text_head": n_head, "n_text_layer": n_layer,
    }
    if bits:
        for name in [n for n in out if n.endswith(".weight")]:
            stem = name[:-len(".weight")]
            linear = stem.split(".")[-1] in ("query", "key", "value", "out", "mlp1", "mlp2", "token_embedding")
            if linear:
                out[name], out[stem + ".scales"], out[stem + ".biases"] = mlx_quantize(out[name], group, bits)
        dims["quantization"] = {"group_size": group, "bits": bits}
    return dims, out


def write_safetensors_any(path, tensors, metadata):
    """safetensors with MLX's dtypes (uint32 packed weights, int64 alignment heads too)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.uint32): "U32", np.dtype(np.int64): "I64"}
    h, off, blobs = {}, 0, []
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        h[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h["__metadata__"] = metadata
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for x in blobs:
            f.write(x)


def to_mlx(src, out, opts):
    dtype = "float32" if "float32" in opts else "float16"
    bits = 4 if "q4" in opts else 8 if "q8" in opts else None
    cfg, tensors = mlx_state(src, dtype, bits)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in ("weights.npz", "weights.safetensors"):
        (out / old).unlink(missing_ok=True)
    if "safetensors" in opts:
        write_safetensors_any(out / "weights.safetensors", tensors, {"format": "mlx"})
    else:
        np.savez(str(out / "weights.npz"), **tensors)
    cfg["model_type"] = "whisper"
    (out / "config.json").write_text(json.dumps(cfg, indent=4))


def ct2_string(x):
    b = x.encode()
    return struct.pack("<H", len(b) + 1) + b + b"\0"


def to_ct2(src, out, int8=False):
    st, cfg, heads = load_any(src)
    f = {k: np.asarray(a, dtype=np.float32) for k, a in st.items()}
    d = int(cfg["d_model"])
    v = {}

    def norm(dst, hf):
        v[f"{dst}/gamma"], v[f"{dst}/beta"] = f[f"{hf}.weight"], f[f"{hf}.bias"]

    def lin(dst, w, b):
        v[f"{dst}/weight"], v[f"{dst}/bias"] = w, b

    def kbias(hf):
        return f.get(f"{hf}.k_proj.bias", np.zeros(d, np.float32))

    def layer(side, i, dec):
        p, s_ = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
        a = f"{p}.self_attn"
        norm(f"{s_}/self_attention/layer_norm", f"{p}.self_attn_layer_norm")
        lin(f"{s_}/self_attention/linear_0",
            np.concatenate([f[f"{a}.q_proj.weight"], f[f"{a}.k_proj.weight"], f[f"{a}.v_proj.weight"]]),
            np.concatenate([f[f"{a}.q_proj.bias"], kbias(a), f[f"{a}.v_proj.bias"]]))
        lin(f"{s_}/self_attention/linear_1", f[f"{a}.out_proj.weight"], f[f"{a}.out_proj.bias"])
        if dec:
            c = f"{p}.encoder_attn"
            norm(f"{s_}/attention/layer_norm", f"{p}.encoder_attn_layer_norm")
            lin(f"{s_}/attention/linear_0", f[f"{c}.q_proj.weight"], f[f"{c}.q_proj.bias"])
            lin(f"{s_}/attention/linear_1", np.concatenate([f[f"{c}.k_proj.weight"], f[f"{c}.v_proj.weight"]]),
                np.concatenate([kbias(c), f[f"{c}.v_proj.bias"]]))
            lin(f"{s_}/attention/linear_2", f[f"{c}.out_proj.weight"], f[f"{c}.out_proj.bias"])
        norm(f"{s_}/ffn/layer_norm", f"{p}.final_layer_norm")
        lin(f"{s_}/ffn/linear_0", f[f"{p}.fc1.weight"], f[f"{p}.fc1.bias"])
        lin(f"{s_}/ffn/linear_1", f[f"{p}.fc2.weight"], f[f"{p}.fc2.bias"])

    for c in ("conv1", "conv2"):
        lin(f"encoder/{c}", f[f"model.encoder.{c}.weight"], f[f"model.encoder.{c}.bias"])
    v["encoder/position_encodings/encodings"] = f["model.encoder.embed_positions.weight"]
    for i in range(int(cfg["encoder_layers"])):
        layer("encoder", i, False)
    norm("encoder/layer_norm", "model.encoder.layer_norm")
    v["decoder/embeddings/weight"] = f["model.decoder.embed_tokens.weight"]
    v["decoder/position_encodings/encodings"] = f["model.decoder.embed_positions.weight"]
    for i in range(int(cfg["decoder_layers"])):
        layer("decoder", i, True)
    norm("decoder/layer_norm", "model.decoder.layer_norm")
    scalars = {"encoder/num_heads": np.int16(cfg["encoder_attention_heads"]),
               "decoder/num_heads": np.int16(cfg["decoder_attention_heads"]),
               "decoder/pre_norm": np.int8(1), "decoder/scale_embeddings": np.int8(0), "decoder/activation": np.int8(1)}
    quant = {}
    if int8:  # the linear layers' and the embedding's matrices, as CTranslate2's int8 mode
        for k in list(v):
            if k.endswith("/weight") and v[k].ndim == 2:
                w = v[k]
                scale = (127.0 / np.maximum(np.abs(w).max(axis=1), 1e-12)).astype(np.float32)
                v[k] = np.clip(np.round(w * scale[:, None]), -127, 127).astype(np.int8)
                quant[k + "_scale"] = scale
    allv = {**{k: a for k, a in v.items()}, **quant, **{k: np.array(x) for k, x in scalars.items()}}
    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
             np.dtype(np.float16): 4}
    blob = bytearray(struct.pack("<I", 6) + ct2_string("WhisperSpec") + struct.pack("<I", 3))
    blob += struct.pack("<I", len(allv))
    for k in sorted(allv):
        a = np.asarray(allv[k]).copy(order="C")  # ascontiguousarray would make scalars 1-d
        blob += ct2_string(k) + struct.pack("<B", a.ndim) + b"".join(struct.pack("<I", x) for x in a.shape)
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        blob += struct.pack("<BI", codes[a.dtype], len(data)) + data
    blob += struct.pack("<I", 1) + ct2_string("decoder/projection/weight") + ct2_string("decoder/embeddings/weight")
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.bin").write_bytes(bytes(blob))
    (out / "config.json").write_text(json.dumps({"alignment_heads": heads or []}) + "\n")


def main(argv):
    mlx_opts = {"float16", "float32", "npz", "safetensors", "q4", "q8"}
    if len(argv) >= 3 and argv[0] == "mlx" and set(argv[3:]) <= mlx_opts:
        to_mlx(argv[1], argv[2], argv[3:])
        print(argv[2])
        return 0
    if len(argv) not in (3, 4) or argv[0] not in ("hf", "ggml", "ct2") or (len(argv) == 4 and argv[3] != "int8"):
        print(__doc__.strip())
        return 2
    if argv[0] == "ct2":
        to_ct2(argv[1], argv[2], len(argv) == 4)
    else:
        (to_hf if argv[0] == "hf" else to_ggml)(argv[1], argv[2])
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
