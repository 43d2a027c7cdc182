#!/usr/bin/env python3
"""Whisper large-v3-turbo shapes on a GPU: saragossa's model (bench/whisper_bench.c built with
CUDA=1) beside transformers' WhisperForConditionalGeneration (float16, sdpa) on the same random
weights and the same 30 s window.

    python3 bench/whisper_gpu.py WHISPER_BENCH [WORK]

Makes WORK/lv3t-random (a random-weight Hugging Face folder at large-v3-turbo's shape, float16:
32 encoder layers, 4 decoder layers, d_model 1280, 128 mel bins, vocabulary 51866; real weights
are not at hand) and WORK/tone.wav (30 s), then times, best of 3:
  - the encoder over one 30 s window;
  - greedy decoding of the same number of tokens (saragossa stops at <|endoftext|> or 222 tokens;
    transformers is forced to the count saragossa decoded), per token.
RTF = (encoder + decoder time of the window) / 30 s.
"""
import math, os, re, struct, subprocess, sys, time, wave

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

bench = sys.argv[1]
work = sys.argv[2] if len(sys.argv) > 2 else "/tmp/whisper-gpu"
os.makedirs(work, exist_ok=True)
folder = os.path.join(work, "lv3t-random")
wav = os.path.join(work, "tone.wav")

if not os.path.exists(os.path.join(folder, "config.json")):
    torch.manual_seed(0)
    cfg = WhisperConfig(vocab_size=51866, num_mel_bins=128, d_model=1280, encoder_layers=32,
                        encoder_attention_heads=20, decoder_layers=4, decoder_attention_heads=20,
                        encoder_ffn_dim=5120, decoder_ffn_dim=5120, max_source_positions=1500,
                        max_target_positions=448, decoder_start_token_id=50258, eos_token_id=50257,
                        pad_token_id=50257, bos_token_id=50257)
    m = WhisperForConditionalGeneration(cfg).half()
    m.save_pretrained(folder, safe_serialization=True)
    del m
if not os.path.exists(wav):
    with wave.open(wav, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * t / 16000) * math.sin(t / 5000)))
                               for t in range(16000 * 30)))

env = dict(os.environ, SARAGOSSA_BACKEND="cuda")
r = subprocess.run([bench, folder, wav, "0", "3"], capture_output=True, text=True, env=env)
print("== saragossa (CUDA)")
print(r.stdout + r.stderr)
n_tok = 222
mt = re.search(r"decode_ms: [0-9.]+ \((\d+) tokens", r.stdout)
if mt:
    n_tok = int(mt.group(1))

print("== transformers", torch.__version__, torch.cuda.get_device_name(0))
m = WhisperForConditionalGeneration.from_pretrained(folder, torch_dtype=torch.float16, attn_implementation="sdpa").cuda().eval()
feats = torch.randn(1, 128, 3000, dtype=torch.float16, device="cuda")
best_enc = best_gen = 1e9
with torch.inference_mode():
    for _ in range(3):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        enc = m.model.encoder(feats)
        torch.cuda.synchronize(); t1 = time.perf_counter()
        best_enc = min(best_enc, t1 - t0)
    for _ in range(3):
        ids = torch.tensor([[50258, 50364]], device="cuda")
        torch.cuda.synchronize(); t0 = time.perf_counter()
        out = m.generate(input_features=feats, decoder_input_ids=ids, min_new_tokens=max(n_tok, 1),
                         max_new_tokens=max(n_tok, 1), do_sample=False, num_beams=1)
        torch.cuda.synchronize(); t1 = time.perf_counter()
        best_gen = min(best_gen, t1 - t0)
print(f"transformers: encoder {best_enc * 1e3:.1f} ms; generate (encoder + {n_tok} tokens) {best_gen * 1e3:.1f} ms; "
      f"RTF {best_gen / 30:.4f}")
