#!/usr/bin/env python3
"""Qwen3-TTS time to first audio and real-time factor: saragossa (libsaragossa.so through ctypes) and
the qwen-tts package's reference (torch) on the same random-weight folder, in one run.

Make the folder first (random bf16 weights at a published shape, never committed):
    python3 tools/make_qwen_tts_bench_model.py --shape 0.6b --out /tmp/qwen3-tts-0.6b

then, on this CPU:
    python3 bench/qwen_tts_bench.py --model /tmp/qwen3-tts-0.6b --backend cpu --threads 2
or on a GPU machine (the reference on cuda in bfloat16, ours with --backend cuda or auto):
    python3 bench/qwen_tts_bench.py --model /tmp/qwen3-tts-1.7b --backend auto --ref-device cuda --ref-dtype bfloat16

Random weights never say end-of-speech, so both sides make the same number of frames: our engine's
cap for the sentence (40 + 4 x characters) is given to the reference as max_new_tokens. TTFA: ours
is the time from sg_speak to the first audio chunk (it streams: 2 frames, then 12 at a time); the
package cannot stream, so its TTFA is its whole generate() plus decode. RTF = wall time / audio
length. --ref-only / --ours-only run one side; the reference needs the qwen-tts package (0.1.1) and
transformers 4.57 on PYTHONPATH.
"""
import argparse
import ctypes
import json
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TTSParams(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char_p), ("n_threads", ctypes.c_int)]


AUDIO_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p)


class SpeakParams(ctypes.Structure):
    _fields_ = [("voice", ctypes.c_char_p), ("language", ctypes.c_char_p), ("instructions", ctypes.c_char_p),
                ("speed", ctypes.c_float), ("noise_scale", ctypes.c_float), ("noise_w", ctypes.c_float),
                ("temperature", ctypes.c_float), ("top_k", ctypes.c_int), ("top_p", ctypes.c_float),
                ("seed", ctypes.c_uint64), ("max_chars", ctypes.c_size_t), ("on_audio", AUDIO_FN), ("user", ctypes.c_void_p),
                ("ref_audio", ctypes.c_void_p), ("ref_audio_size", ctypes.c_size_t), ("ref_text", ctypes.c_char_p),
                ("x_vector_only", ctypes.c_int)]


def ours(a):
    lib = ctypes.CDLL(os.path.join(ROOT, "build", "libsaragossa.so"))
    lib.sg_tts_default_params.restype = TTSParams
    lib.sg_speak_default_params.restype = SpeakParams
    lib.sg_last_error.restype = ctypes.c_char_p
    lib.sg_tts_voice.restype = ctypes.c_char_p
    tp = lib.sg_tts_default_params()
    tp.backend = a.backend.encode()
    tp.n_threads = a.threads
    h = ctypes.c_void_p()
    t0 = time.perf_counter()
    if lib.sg_tts_load(a.model.encode(), ctypes.byref(tp), ctypes.byref(h)):
        sys.exit("load: " + lib.sg_last_error().decode())
    load_s = time.perf_counter() - t0
    rate = lib.sg_tts_sample_rate(h)
    res = []
    for rep in range(a.reps):
        st = dict(first=None, n=0)

        def on_audio(pcm, n, user):
            if st["first"] is None:
                st["first"] = time.perf_counter()
            st["n"] += n
            return 0

        cb = AUDIO_FN(on_audio)
        p = lib.sg_speak_default_params()
        p.voice = lib.sg_tts_voice(h, 0)
        p.temperature = a.temperature
        p.seed = rep + 1
        p.on_audio = cb
        t0 = time.perf_counter()
        if lib.sg_speak(h, a.text.encode(), ctypes.byref(p), None, None):
            sys.exit("speak: " + lib.sg_last_error().decode())
        wall = time.perf_counter() - t0
        audio = st["n"] / rate
        res.append(dict(ttfa_s=st["first"] - t0, wall_s=wall, audio_s=audio, rtf=wall / audio))
    lib.sg_tts_free(h)
    return dict(load_s=load_s, runs=res)


def reference(a, frames):
    pkg = None
    for p in sys.path:
        if os.path.isdir(os.path.join(p, "qwen_tts", "core")):
            pkg = os.path.join(p, "qwen_tts")
    if pkg:  # skip the package __init__ (audio I/O imports the model classes do not need)
        m = types.ModuleType("qwen_tts")
        m.__path__ = [pkg]
        sys.modules["qwen_tts"] = m
    # modules the package imports at the top but synthesis with a preset speaker never calls (the
    # speaker encoder's mel filters, the 25 Hz tokenizer's sox effects): stand-ins where not installed
    import importlib.machinery
    import importlib.util
    names = ("librosa", "librosa.filters", "sox", "onnxruntime", "soundfile", "torchaudio", "torchaudio.compliance",
             "torchaudio.compliance.kaldi")
    absent = {n for n in names if "." not in n and n not in sys.modules and importlib.util.find_spec(n) is None}
    for name in [n for n in names if n.split(".")[0] in absent]:
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        mod.__getattr__ = lambda attr, name=name: (  # a name that fails when it is used, not when imported
            None if attr.startswith("__") else lambda *x, **k: (_ for _ in ()).throw(RuntimeError(name + " is not installed")))
        sys.modules[name] = mod
        if "." in name:
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, mod)
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2TokenizerFast
    from qwen_tts.core.models import modeling_qwen3_tts as M
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as T
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2DecoderConfig

    torch.set_num_threads(a.threads)
    dt = getattr(torch, a.ref_dtype)
    t0 = time.perf_counter()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    conf = Qwen3TTSConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "dtype")})
    conf._attn_implementation = "sdpa"
    with torch.device(a.ref_device):
        model = M.Qwen3TTSForConditionalGeneration(conf).eval()
    model.load_state_dict(load_file(os.path.join(a.model, "model.safetensors")), strict=False)
    model.to(a.ref_device, dt)
    dcfg = json.load(open(os.path.join(a.model, "speech_tokenizer", "config.json")))["decoder_config"]
    dconf = Qwen3TTSTokenizerV2DecoderConfig(**dcfg)
    dconf._attn_implementation = "sdpa"
    dec = T.Qwen3TTSTokenizerV2Decoder(dconf).eval()
    sd = {k[len("decoder."):]: v for k, v in load_file(os.path.join(a.model, "speech_tokenizer", "model.safetensors")).items()}
    dec.load_state_dict(sd, strict=False)
    dec.to(a.ref_device, dt)
    tok = Qwen2TokenizerFast.from_pretrained(a.model)
    load_s = time.perf_counter() - t0
    ids = tok("<|im_start|>assistant\n%s<|im_end|>\n<|im_start|>assistant\n" % a.text, return_tensors="pt").input_ids
    spk = sorted(cfg["talker_config"]["spk_id"])[0]
    res = []
    for rep in range(a.reps):
        torch.manual_seed(rep + 1)
        sync = torch.cuda.synchronize if a.ref_device.startswith("cuda") else (lambda: None)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            codes, _ = model.generate(input_ids=[ids.to(a.ref_device)], languages=["auto"], speakers=[spk], non_streaming_mode=True,
                                      max_new_tokens=frames, do_sample=a.temperature > 0, temperature=a.temperature or 1.0,
                                      subtalker_dosample=a.temperature > 0)
            wav = dec.chunked_decode(codes[0].T.unsqueeze(0))
        sync()
        wall = time.perf_counter() - t0
        audio = wav.shape[-1] / 24000
        res.append(dict(ttfa_s=wall, wall_s=wall, audio_s=audio, rtf=wall / audio, frames=int(codes[0].shape[0])))
    return dict(load_s=load_s, runs=res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", default="Hello there, this is a test.")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.9)
    ap.add_argument("--ref-device", default="cpu")
    ap.add_argument("--ref-dtype", default="float32")
    ap.add_argument("--ours-only", action="store_true")
    ap.add_argument("--ref-only", action="store_true")
    a = ap.parse_args()
    frames = 40 + 4 * len(a.text)
    out = dict(text=a.text, frames_cap=frames, load=os.getloadavg())
    if not a.ref_only:
        out["saragossa"] = ours(a)
    if not a.ours_only:
        out["reference"] = reference(a, frames)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
