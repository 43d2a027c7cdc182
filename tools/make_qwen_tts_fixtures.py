#!/usr/bin/env python3
"""Build the Qwen3-TTS reference fixture: a tiny random-weight model run by the `qwen-tts` package.

The package (0.1.1, reference code only, no weights) defines the talker (a Qwen3-family decoder over
codec embeddings plus projected text embeddings), its code predictor (a small decoder that produces
codebooks 1..G-1 of every 12 Hz frame) and the speech tokenizer's decoder ("Qwen3-TTS-Tokenizer-12Hz":
split RVQ dequantisation, a sliding-window transformer, causal convolutions, transposed convolutions,
ConvNeXt blocks and SnakeBeta activations down to a waveform). This script builds those classes at
SMALL shapes, fills them with seeded random weights rounded to bf16, runs the reference in float32 on
the CPU and writes

    <out>/config.json, <out>/model.safetensors        the talker and code predictor (bf16), as
                                                      save_pretrained names them ("talker.*")
    <out>/speech_tokenizer/config.json, model.safetensors   the codec decoder (bf16, "decoder.*")
    <out>/generation_config.json                     the sampling defaults the package reads
    <out>/ref.json                                   the reference results:
        cases[]: the talker inputs (input_ids of the chat-formatted text, instruct_ids or null,
                 speaker, language, non_streaming_mode, max_new_tokens), the greedy codes
                 [frames][groups] the package's generate() returns, and the smallest top-1 margin
                 of any greedy choice (talker and code predictor)
        decode:  codes [frames][groups] -> wav (one-shot decoder forward, clamped) and
                 wav_stream (the package's chunked_decode with chunk / left_context below)

Token ids are given as ids: the fixture's text vocabulary is random, so no tokenizer is involved.

With --kind base it builds the voice-clone fixture instead (tests/fixtures/qwen3_tts/base): a Base
model (tts_model_type "base": the same talker shape plus a small ECAPA-TDNN speaker encoder,
"speaker_encoder.*"), a speech tokenizer with both halves (a small Mimi encoder "encoder.*" and a
decoder "decoder.*", 160 samples a frame), ref.wav (a 0.3 s 24 kHz 16-bit clip) and ref.json:
    mel            the package's mel_spectrogram of the clip [frames][128]
    spk_embedding  extract_speaker_embedding (the x-vector)
    ref_codes      the tokenizer's encode of the clip [frames][groups] and the smallest relative
                   margin of any nearest-codebook choice
    cases[]        generate() with a voice_clone_prompt: x-vector only, and in-context (ref_ids
                   and ref_code) with streaming and non-streaming text; greedy codes and margins
    speak          the same through the fixture tokenizer (text and ref_text as strings)

Needs the qwen-tts package and transformers 4.57 on the path (CPU torch):
    PYTHONPATH=<qwen-tts + transformers 4.57 dir> python3 tools/make_qwen_tts_fixtures.py --out tests/fixtures/qwen3_tts/tiny
"""
import argparse
import json
import os
import sys
import types

import numpy as np

# the package's __init__ pulls in audio I/O libraries the model classes do not need
_pkg = None
for p in sys.path:
    if os.path.isdir(os.path.join(p, "qwen_tts", "core")):
        _pkg = os.path.join(p, "qwen_tts")
        break
if _pkg:
    m = types.ModuleType("qwen_tts")
    m.__path__ = [_pkg]
    sys.modules["qwen_tts"] = m

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from qwen_tts.core.models import modeling_qwen3_tts as M  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as T  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2DecoderConfig,
)

CODEBOOK = 64
GROUPS = 4
TEXT_VOCAB = 400
SPECIAL = dict(codec_pad_id=CODEBOOK + 6, codec_bos_id=CODEBOOK + 7, codec_eos_token_id=CODEBOOK + 8,
               codec_think_id=CODEBOOK + 9, codec_nothink_id=CODEBOOK + 10, codec_think_bos_id=CODEBOOK + 11,
               codec_think_eos_id=CODEBOOK + 12)

TALKER = dict(
    vocab_size=CODEBOOK + 1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, rope_theta=10000.0,
    rope_scaling={"mrope_section": [2, 1, 1], "interleaved": True, "rope_type": "default"},
    num_code_groups=GROUPS, text_hidden_size=48, text_vocab_size=TEXT_VOCAB, hidden_act="silu",
    spk_id={"alice": CODEBOOK + 20, "bob": CODEBOOK + 21}, spk_is_dialect={"alice": False, "bob": False},
    codec_language_id={"english": CODEBOOK + 30, "chinese": CODEBOOK + 31},
    code_predictor_config=dict(vocab_size=CODEBOOK, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6,
                               rope_theta=10000.0, num_code_groups=GROUPS, hidden_act="silu"),
    **SPECIAL,
)
TOP = dict(im_start_token_id=390, im_end_token_id=391, tts_pad_token_id=395, tts_bos_token_id=396,
           tts_eos_token_id=397)
SPECIAL_TEXT = {390: "<|im_start|>", 391: "<|im_end|>", 392: "<|endoftext|>", 393: "<|unused_0|>", 394: "<|unused_1|>",
                395: "<tts_pad>", 396: "<tts_text_bos>", 397: "<tts_text_eod>"}
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n", "e r", "o n", "Ġ s", "r e", "Ġ w", "a t", "e n", "l l", "H e", "He ll",
          "Hell o", "Ġthe re", "Ġ b", "o u", "Ġb e", "in g", "Ġ i", "Ġi s", "Ġ h", "Ġh ow", "o w"]
SPEAK_TEXT = "Hello there, how is it going?"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_tokenizer(out):
    """A tiny byte-level BPE in the files a Qwen3-TTS folder holds (vocab.json, merges.txt,
    tokenizer_config.json); returns transformers' Qwen2TokenizerFast built from them."""
    from transformers import Qwen2TokenizerFast
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    for m in MERGES:
        a, b = m.split(" ")
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) < 380
    while len(vocab) < 390:  # unreachable fillers: the special tokens sit at 390.. as in the config
        vocab["<|filler_%d|>" % len(vocab)] = len(vocab)
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")
    cfg = dict(tokenizer_class="Qwen2Tokenizer", model_max_length=32768, errors="replace", split_special_tokens=False,
               bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None, clean_up_tokenization_spaces=False,
               added_tokens_decoder={str(i): dict(content=t, lstrip=False, normalized=False, rstrip=False, single_word=False,
                                                  special=True) for i, t in SPECIAL_TEXT.items()})
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return Qwen2TokenizerFast.from_pretrained(out)

DECODER = dict(codebook_size=CODEBOOK, codebook_dim=16, hidden_size=32, latent_dim=24, head_dim=8,
               num_attention_heads=4, num_key_value_heads=4, intermediate_size=48, num_hidden_layers=2,
               sliding_window=6, rms_norm_eps=1e-5, rope_theta=10000.0, num_quantizers=GROUPS,
               upsample_rates=[2, 3], upsampling_ratios=[2, 2], decoder_dim=32, max_position_embeddings=8000,
               hidden_act="silu", layer_scale_initial_scale=0.01)

STREAM_CHUNK, STREAM_CONTEXT = 3, 5


def bf16(a):
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return t.to(torch.bfloat16).to(torch.float32)


def fill(model, rng, special):
    """Seeded random values, rounded to bf16; special(name, shape) may return its own array."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            a = special(name, tuple(p.shape))
            if a is None:
                if p.ndim == 1:
                    a = (1.0 + 0.2 * rng.standard_normal(p.shape)) if "norm" in name else 0.1 * rng.standard_normal(p.shape)
                else:
                    fan_in = int(np.prod(p.shape[1:]))
                    a = rng.standard_normal(p.shape) / np.sqrt(fan_in)
            p.copy_(bf16(a))


def talker_special(rng):
    def f(name, shape):
        if name.endswith("codec_embedding.weight") or ".codec_embedding." in name or name.endswith("text_embedding.weight"):
            return rng.standard_normal(shape)
        if name.endswith("codec_head.weight") or ".lm_head." in name:
            return 3.0 * rng.standard_normal(shape) / np.sqrt(shape[1])
        return None
    return f


def decoder_special(rng):
    def f(name, shape):
        if name.endswith("cluster_usage"):
            return rng.uniform(0.5, 2.0, shape)
        if name.endswith("embedding_sum"):
            return rng.standard_normal(shape)
        if name.endswith(".alpha") or name.endswith(".beta"):
            return 0.3 * rng.standard_normal(shape)
        if name.endswith("layer_scale.scale") or name.endswith(".gamma"):
            return rng.uniform(0.2, 1.0, shape)
        if name.endswith("decoder.%d.conv.bias" % (2 + len(DECODER["upsample_rates"]))):
            return 0.01 * rng.standard_normal(shape)
        if name.endswith("decoder.%d.conv.weight" % (2 + len(DECODER["upsample_rates"]))):
            return 0.02 * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        return None
    return f


class Margins:
    """Records the top-1 margin of every greedy choice (talker: over the allowed tokens)."""

    def __init__(self, talker):
        self.m = []
        allowed = torch.zeros(TALKER["vocab_size"], dtype=torch.bool)
        allowed[:CODEBOOK] = True
        allowed[SPECIAL["codec_eos_token_id"]] = True
        head = talker.codec_head

        def hook_t(mod, inp, out):
            lg = out[0, -1][allowed]
            v = torch.topk(lg, 2).values
            self.m.append(float(v[0] - v[1]))

        def hook_c(mod, inp, out):
            v = torch.topk(out[0, -1], 2).values
            self.m.append(float(v[0] - v[1]))
        head.register_forward_hook(hook_t)
        for h in talker.code_predictor.lm_head:
            h.register_forward_hook(hook_c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", choices=["custom_voice", "base"], default="custom_voice")
    args = ap.parse_args()
    if args.kind == "base":
        return make_base(args)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    for seed in range(args.seed, args.seed + 50):
        rng = np.random.default_rng(seed)
        cfg = Qwen3TTSConfig(talker_config=dict(TALKER), tokenizer_type="qwen3_tts_tokenizer_12hz",
                             tts_model_size="tiny", tts_model_type="custom_voice", **TOP)
        cfg._attn_implementation = "eager"
        cfg.talker_config._attn_implementation = "eager"
        cfg.talker_config.code_predictor_config._attn_implementation = "eager"
        model = M.Qwen3TTSForConditionalGeneration(cfg).eval()
        fill(model, rng, talker_special(rng))
        margins = Margins(model.talker)

        text = [int(x) for x in rng.integers(0, 380, 9)]
        ids = [TOP["im_start_token_id"], 11, 12] + text + [TOP["im_end_token_id"], 13, TOP["im_start_token_id"], 11, 12]
        instruct = [TOP["im_start_token_id"], 14, 12] + [int(x) for x in rng.integers(0, 380, 4)] + [TOP["im_end_token_id"], 12]
        cases = [
            dict(input_ids=ids, instruct_ids=None, speaker="alice", language="english", non_streaming_mode=True,
                 max_new_tokens=16),
            dict(input_ids=ids, instruct_ids=instruct, speaker=None, language="auto", non_streaming_mode=False,
                 max_new_tokens=16),
            dict(input_ids=ids[:3] + text[:2] + ids[-5:], instruct_ids=None, speaker="bob", language="chinese",
                 non_streaming_mode=False, max_new_tokens=12),
        ]
        ok = True
        for c in cases:
            margins.m = []
            codes, _ = model.generate(
                input_ids=[torch.tensor([c["input_ids"]])],
                instruct_ids=[torch.tensor([c["instruct_ids"]]) if c["instruct_ids"] else None],
                languages=[c["language"]], speakers=[c["speaker"]], non_streaming_mode=c["non_streaming_mode"],
                max_new_tokens=c["max_new_tokens"], do_sample=False, subtalker_dosample=False)
            c["codes"] = codes[0].tolist()
            c["min_margin"] = min(margins.m)
            if c["min_margin"] < 0.02 or len(c["codes"]) < 3:
                ok = False
        if not ok:
            continue
        break
    else:
        sys.exit("no seed gave clear greedy margins")

    os.makedirs(os.path.join(args.out, "speech_tokenizer"), exist_ok=True)
    tok = write_tokenizer(args.out)
    tok_cases = [SPEAK_TEXT, "<|im_start|>assistant\nÜnïcode 日本 1234 it's<|im_end|>\n", "  two  spaces\nand lines\n\n"]
    tokenize = [dict(text=t, ids=tok(t).input_ids) for t in tok_cases]
    chat = "<|im_start|>assistant\n%s<|im_end|>\n<|im_start|>assistant\n" % SPEAK_TEXT
    speak_ids = tok(chat).input_ids
    speak_frames = 40 + 4 * len(SPEAK_TEXT)  # the engine's cap for a sentence of this length
    margins.m = []
    codes, _ = model.generate(input_ids=[torch.tensor([speak_ids])], instruct_ids=[None], languages=["auto"],
                              speakers=["alice"], non_streaming_mode=True, max_new_tokens=speak_frames, do_sample=False,
                              subtalker_dosample=False)
    speak = dict(text=SPEAK_TEXT, voice="alice", ids=speak_ids, max_new_tokens=speak_frames, codes=codes[0].tolist(),
                 min_margin=min(margins.m))

    dcfg = Qwen3TTSTokenizerV2DecoderConfig(**DECODER)
    dcfg._attn_implementation = "eager"
    dec = T.Qwen3TTSTokenizerV2Decoder(dcfg).eval()
    wrapper = torch.nn.Module()
    wrapper.decoder = dec
    fill(wrapper, rng, decoder_special(rng))
    dcodes = cases[0]["codes"] + cases[1]["codes"]
    with torch.no_grad():
        sc = torch.tensor(speak["codes"]).T.unsqueeze(0)
        speak["wav"] = [round(float(x), 7) for x in dec.chunked_decode(sc)[0, 0].clamp(-1, 1)]
        # the engine's streaming plan: 2 frames, then 12 at a time, each chunk decoded by the
        # package's decoder with up to 25 frames of left context (chunked_decode's rule)
        parts, start, nT = [], 0, sc.shape[-1]
        while start < nT:
            end = min(start + (2 if start == 0 else 12), nT)
            ctx = min(25, start)
            parts.append(dec(sc[..., start - ctx:end])[0, 0, ctx * dec.total_upsample:])
            start = end
        speak["wav_chunks"] = [round(float(x), 7) for x in torch.cat(parts)]
        c = torch.tensor(dcodes).T.unsqueeze(0)
        wav = dec(c)[0, 0]
        wav_stream = dec.chunked_decode(c, chunk_size=STREAM_CHUNK, left_context_size=STREAM_CONTEXT)[0, 0]

    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(dict(sorted(sd.items())), os.path.join(args.out, "model.safetensors"))
    conf = cfg.to_dict()
    conf["dtype"] = "bfloat16"
    for k in ("_attn_implementation_autoset",):
        conf.pop(k, None)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(dict(do_sample=True, repetition_penalty=1.05, temperature=0.9, top_p=1.0, top_k=50,
                       subtalker_dosample=True, subtalker_temperature=0.9, subtalker_top_p=1.0, subtalker_top_k=50,
                       max_new_tokens=8192), f, indent=1)
    dsd = {k: v.to(torch.bfloat16).contiguous() for k, v in wrapper.state_dict().items()}
    save_file(dict(sorted(dsd.items())), os.path.join(args.out, "speech_tokenizer", "model.safetensors"))
    tconf = dict(model_type="qwen3_tts_tokenizer_12hz", architectures=["Qwen3TTSTokenizerV2Model"],
                 decoder_config=dcfg.to_dict(), encoder_valid_num_quantizers=GROUPS, input_sample_rate=24000,
                 output_sample_rate=24000, decode_upsample_rate=int(np.prod(DECODER["upsample_rates"] + DECODER["upsampling_ratios"])),
                 encode_downsample_rate=int(np.prod(DECODER["upsample_rates"] + DECODER["upsampling_ratios"])))
    tconf["decoder_config"].pop("_attn_implementation_autoset", None)
    with open(os.path.join(args.out, "speech_tokenizer", "config.json"), "w") as f:
        json.dump(tconf, f, indent=1, sort_keys=True)
    ref = dict(seed=seed, torch=torch.__version__, cases=cases, tokenize=tokenize, speak=speak,
               decode=dict(codes=dcodes, wav=[round(float(x), 7) for x in wav],
                           stream_chunk=STREAM_CHUNK, stream_context=STREAM_CONTEXT,
                           wav_stream=[round(float(x), 7) for x in wav_stream]))
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(ref, f)
    print("speak frames", len(speak["codes"]), "margin", speak["min_margin"])
    print("seed", seed, "frames", [len(c["codes"]) for c in cases], "margins", [round(c["min_margin"], 3) for c in cases],
          "wav", wav.shape, float(wav.abs().max()), "stream-vs-oneshot", float((wav - wav_stream).abs().max()), "clipped", int((wav.abs() >= 1).sum()), "rms", float(wav.pow(2).mean().sqrt()))


SPK = dict(mel_dim=128, enc_dim=TALKER["hidden_size"], enc_channels=[16, 16, 16, 16, 48], enc_kernel_sizes=[5, 3, 3, 3, 1],
           enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8, enc_res2net_scale=4, enc_se_channels=8,
           sample_rate=24000)
# Mimi at a small shape: 24 kHz / (5*4*4) = 300 Hz, then the stride-2 downsample: 150 Hz, 160
# samples a frame; a sliding window shorter than the clip's frames shows which mask runs
ENCODER = dict(sampling_rate=24000, frame_rate=150.0, audio_channels=1, hidden_size=32, num_filters=8,
               num_residual_layers=1, upsampling_ratios=[4, 4, 5], kernel_size=7, last_kernel_size=3,
               residual_kernel_size=3, dilation_growth_rate=2, use_causal_conv=True, pad_mode="constant", compress=2,
               trim_right_ratio=1.0, codebook_size=CODEBOOK, codebook_dim=16, num_quantizers=6,
               use_conv_shortcut=False, vector_quantization_hidden_dimension=16, num_semantic_quantizers=1,
               upsample_groups=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=4,
               num_key_value_heads=4, head_dim=8, hidden_act="gelu", max_position_embeddings=8000, norm_eps=1e-5,
               use_cache=False, use_streaming=False, rope_theta=10000.0, sliding_window=8, attention_bias=False,
               layer_scale_initial_scale=0.01)
BASE_DECODER = dict(DECODER, upsample_rates=[5, 4], upsampling_ratios=[2, 4])
CLIP = 7200  # 0.3 s at 24 kHz: 45 code frames, 28 mel frames
REF_TEXT = "He is here."


def encoder_special(rng):
    def f(name, shape):
        if name.endswith("cluster_usage"):
            return rng.uniform(0.5, 2.0, shape)
        if name.endswith("embed_sum"):
            return rng.standard_normal(shape)
        if name.endswith("initialized"):
            return np.ones(shape)
        if name.endswith("layer_scale.scale"):
            return rng.uniform(0.2, 1.0, shape)
        if "layernorm" in name and name.endswith(".weight"):
            return 1.0 + 0.2 * rng.standard_normal(shape)
        return None
    return f


def rvq_margin(q, emb):
    """The smallest relative gap between the nearest and second-nearest code over every choice the
    split RVQ's encode makes on emb [1][C][T] for the codebooks kept (GROUPS)."""
    worst = np.inf
    for rvq, n in ((q.semantic_residual_vector_quantizer, 1), (q.acoustic_residual_vector_quantizer, GROUPS - 1)):
        x = rvq.input_proj(emb) if rvq.input_proj is not None else emb
        r = x
        for layer in rvq.layers[:n]:
            e = layer.codebook.embed
            d = torch.cdist(r[0].T[None].float(), e[None].float())[0]
            top = torch.topk(d, 2, largest=False).values
            worst = min(worst, float(((top[:, 1] - top[:, 0]) / top[:, 1].clamp(min=1e-6)).min()))
            r = r - layer.decode(layer.encode(r))
    return worst


def make_base(args):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    import soundfile as sf
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config

    os.makedirs(os.path.join(args.out, "speech_tokenizer"), exist_ok=True)
    tok = write_tokenizer(args.out)
    for seed in range(args.seed, args.seed + 50):
        rng = np.random.default_rng(seed)
        cfg = Qwen3TTSConfig(talker_config=dict(TALKER, spk_id={}, spk_is_dialect={}), speaker_encoder_config=dict(SPK),
                             tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="tiny", tts_model_type="base", **TOP)
        cfg._attn_implementation = "eager"
        cfg.talker_config._attn_implementation = "eager"
        cfg.talker_config.code_predictor_config._attn_implementation = "eager"
        model = M.Qwen3TTSForConditionalGeneration(cfg).eval()
        fill(model, rng, talker_special(rng))
        margins = Margins(model.talker)

        tcfg = Qwen3TTSTokenizerV2Config(encoder_config=dict(ENCODER), decoder_config=dict(BASE_DECODER),
                                         encoder_valid_num_quantizers=GROUPS, input_sample_rate=24000,
                                         output_sample_rate=24000, decode_upsample_rate=160, encode_downsample_rate=160)
        tcfg._attn_implementation = "eager"
        tcfg.encoder_config._attn_implementation = "eager"
        tcfg.decoder_config._attn_implementation = "eager"
        st = T.Qwen3TTSTokenizerV2Model(tcfg).eval()
        fill(st.decoder, rng, decoder_special(rng))
        enc_special = encoder_special(rng)
        with torch.no_grad():
            for name, b in st.encoder.named_buffers():
                a = enc_special(name, tuple(b.shape))
                if a is not None and b.dtype == torch.float32:
                    b.copy_(bf16(a))
        fill(st.encoder, rng, enc_special)

        # the clip: a few partials and noise, as 16-bit samples (what ref.wav stores)
        t = np.arange(CLIP) / 24000.0
        x = sum(rng.uniform(0.05, 0.2) * np.sin(2 * np.pi * rng.uniform(80, 3000) * t + rng.uniform(0, 6)) for _ in range(6))
        x = x + 0.02 * rng.standard_normal(CLIP)
        q = np.clip(np.round(x / np.abs(x).max() * 0.6 * 32767), -32768, 32767).astype(np.int16)
        wav = q.astype(np.float32) / 32768.0

        with torch.no_grad():
            mel = M.mel_spectrogram(torch.from_numpy(wav).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=24000,
                                    hop_size=256, win_size=1024, fmin=0, fmax=12000).transpose(1, 2)
            spk = model.extract_speaker_embedding(wav, 24000)
            enc = st.encode(torch.from_numpy(wav)[None], torch.ones(1, CLIP, dtype=torch.long))
            ref_code = enc.audio_codes[0]  # [frames][groups]
            e = st.encoder
            emb = e.encoder(torch.from_numpy(wav)[None, None])
            emb = e.encoder_transformer(emb.transpose(1, 2), return_dict=True)[0].transpose(1, 2)
            emb = e.downsample(emb)
            rmargin = rvq_margin(e.quantizer, emb)

        text = [int(v) for v in rng.integers(0, 380, 9)]
        ids = [TOP["im_start_token_id"], 11, 12] + text + [TOP["im_end_token_id"], 13, TOP["im_start_token_id"], 11, 12]
        rtext = [int(v) for v in rng.integers(0, 380, 5)]
        ref_ids = [TOP["im_start_token_id"], 11, 12] + rtext + [TOP["im_end_token_id"], 13]
        cases = [
            dict(mode="x_vector", input_ids=ids, ref_ids=None, language="english", non_streaming_mode=False, max_new_tokens=16),
            dict(mode="icl", input_ids=ids, ref_ids=ref_ids, language="auto", non_streaming_mode=False, max_new_tokens=16),
            dict(mode="icl", input_ids=ids, ref_ids=ref_ids, language="english", non_streaming_mode=True, max_new_tokens=12),
            # fewer text rows than codec rows, and more: both branches of the streaming ICL prompt
            dict(mode="icl", input_ids=ids[:3] + text[:2] + ids[-5:], ref_ids=[TOP["im_start_token_id"], 11, 12] + rtext * 12 +
                 [TOP["im_end_token_id"], 13], language="auto", non_streaming_mode=False, max_new_tokens=12),
        ]

        def run(c):
            icl = c["mode"] == "icl"
            prompt = dict(ref_code=[ref_code if icl else None], ref_spk_embedding=[spk], x_vector_only_mode=[not icl],
                          icl_mode=[icl])
            margins.m = []
            codes, _ = model.generate(input_ids=[torch.tensor([c["input_ids"]])],
                                      ref_ids=[torch.tensor([c["ref_ids"]]) if icl else None], voice_clone_prompt=prompt,
                                      languages=[c["language"]], non_streaming_mode=c["non_streaming_mode"],
                                      max_new_tokens=c["max_new_tokens"], do_sample=False, subtalker_dosample=False)
            return codes[0].tolist(), min(margins.m)

        ok = rmargin > 1e-3
        for c in cases:
            c["codes"], c["min_margin"] = run(c)
            ok = ok and c["min_margin"] >= 0.01 and len(c["codes"]) >= 3
        print("seed", seed, "rvq margin %.4f" % rmargin, "greedy", [(len(c["codes"]), round(c["min_margin"], 3)) for c in cases],
              file=sys.stderr)
        if ok:
            break
    else:
        sys.exit("no seed gave clear greedy and codebook margins")

    chat = "<|im_start|>assistant\n%s<|im_end|>\n<|im_start|>assistant\n" % SPEAK_TEXT
    speak_ids = tok(chat).input_ids
    ref_chat_ids = tok("<|im_start|>assistant\n%s<|im_end|>\n" % REF_TEXT).input_ids
    speak_frames = 40 + 4 * len(SPEAK_TEXT)
    speak = dict(text=SPEAK_TEXT, ref_text=REF_TEXT, ids=speak_ids, ref_ids=ref_chat_ids, max_new_tokens=speak_frames)
    for mode in ("x_vector", "icl"):
        c = dict(mode=mode, input_ids=speak_ids, ref_ids=ref_chat_ids, language="auto", non_streaming_mode=False,
                 max_new_tokens=speak_frames)
        speak[mode + "_codes"], speak[mode + "_margin"] = run(c)
        # the engine's streaming plan (2 frames, then 12, up to 25 frames of left context), the
        # reference frames in front as context only when in-context
        pre = ref_code.tolist() if mode == "icl" else []
        allc = torch.tensor(pre + speak[mode + "_codes"]).T.unsqueeze(0)
        parts, start, nT = [], len(pre), allc.shape[-1]
        with torch.no_grad():
            while start < nT:
                end = min(start + (2 if start == len(pre) else 12), nT)
                ctx = min(25, start)
                parts.append(st.decoder(allc[..., start - ctx:end])[0, 0, ctx * st.decoder.total_upsample:])
                start = end
        speak[mode + "_wav_chunks"] = [round(float(v), 7) for v in torch.cat(parts)]

    sf.write(os.path.join(args.out, "ref.wav"), q, 24000, subtype="PCM_16")
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(dict(sorted(sd.items())), os.path.join(args.out, "model.safetensors"))
    conf = cfg.to_dict()
    conf["dtype"] = "bfloat16"
    conf.pop("_attn_implementation_autoset", None)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(dict(do_sample=True, repetition_penalty=1.05, temperature=0.9, top_p=1.0, top_k=50,
                       subtalker_dosample=True, subtalker_temperature=0.9, subtalker_top_p=1.0, subtalker_top_k=50,
                       max_new_tokens=8192), f, indent=1)
    tsd = {k: v.to(torch.bfloat16).contiguous() for k, v in st.state_dict().items()
           if not k.endswith(".initialized")}
    save_file(dict(sorted(tsd.items())), os.path.join(args.out, "speech_tokenizer", "model.safetensors"))
    tconf = tcfg.to_dict()
    for k in ("encoder_config", "decoder_config"):
        tconf[k].pop("_attn_implementation_autoset", None)
    with open(os.path.join(args.out, "speech_tokenizer", "config.json"), "w") as f:
        json.dump(tconf, f, indent=1, sort_keys=True)
    ref = dict(seed=seed, torch=torch.__version__, clip_samples=CLIP,
               mel=[[round(float(v), 6) for v in row] for row in mel[0]],
               spk_embedding=[float(v) for v in spk], ref_codes=ref_code.tolist(), rvq_margin=rmargin,
               cases=cases, speak=speak)
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(ref, f)
    print("seed", seed, "rvq margin", round(rmargin, 4), "ref frames", len(ref_code), "frames",
          [len(c["codes"]) for c in cases], "margins", [round(c["min_margin"], 3) for c in cases],
          "speak", len(speak["x_vector_codes"]), len(speak["icl_codes"]), "spk", [round(float(v), 3) for v in spk[:4]])


if __name__ == "__main__":
    main()
