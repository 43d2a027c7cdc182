#!/usr/bin/env python3
"""Writes tests/fixtures/whisper_tiny_en/ct2_ref.safetensors: reference numbers of the real Whisper
tiny.en (faster-whisper's CTranslate2 folder, fetched by `tools/fetch_models.py whisper-tiny.en`)
on a few speech clips, computed by CTranslate2 itself.

Per clip <c> (jfk.wav from the pywhispercpp sdist, LibriVox utterances from the pocketsphinx
sdist; both under ~/.cache/saragossa/pip):
  <c>.enc_rows   float32 [len(ROWS)][d_model]: encoder output rows ROWS
  <c>.enc_stats  float32 [2]: mean and standard deviation of the whole encoder output [1500][d]
  <c>.greedy     int32 [k]: CTranslate2's greedy tokens after PROMPT, no suppression at all
                 (suppress_blank off, suppress_tokens empty), up to and without <|endoftext|>

The encoder input is transformers' WhisperFeatureExtractor log-mel of the clip (the reference
src/audio/mel.c follows, within 1e-4), so the test feeds the mel it computes itself.

usage: /path/to/venv-with-ctranslate2-and-transformers/bin/python tools/make_whisper_ref.py MODEL_DIR [OUT]
"""
import io
import json
import pathlib
import sys
import tarfile
import wave

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
PIP = pathlib.Path.home() / ".cache" / "saragossa" / "pip"
ROWS = [0, 1, 100, 375, 750, 1100, 1498, 1499]
PROMPT = [50257, 50362]  # <|startoftranscript|> <|notimestamps|> (tiny.en)

# clip name: (sdist, member)
CLIPS = {
    "jfk": ("pywhispercpp-1.5.1.tar.gz", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
    "austen_0870": ("pocketsphinx-5.1.1.tar.gz",
                    "pocketsphinx-5.1.1/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"),
    "austen_0890": ("pocketsphinx-5.1.1.tar.gz",
                    "pocketsphinx-5.1.1/test/data/librivox/sense_and_sensibility_01_austen_64kb-0890.wav"),
}


def read_clip(sdist, member):
    with tarfile.open(PIP / sdist) as t:
        data = t.extractfile(member).read()
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, member
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def main(argv):
    if len(argv) < 1:
        print(__doc__.strip())
        return 2
    import ctranslate2
    import safetensors.numpy
    from transformers import WhisperFeatureExtractor

    model_dir = argv[0]
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "fixtures" / "whisper_tiny_en"
    out.mkdir(parents=True, exist_ok=True)
    fe = WhisperFeatureExtractor(feature_size=80)
    model = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type="float32")
    tensors, meta = {}, {}
    for name, (sdist, member) in CLIPS.items():
        pcm = read_clip(sdist, member)
        mel = fe(pcm, sampling_rate=16000, return_tensors="np").input_features.astype(np.float32)  # [1][80][3000]
        feats = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel))
        enc = np.array(model.encode(feats, to_cpu=True))[0]
        res = model.generate(feats, [PROMPT], beam_size=1, suppress_blank=False, suppress_tokens=[], max_length=224,
                             return_scores=False)
        ids = [t for t in res[0].sequences_ids[0] if t != 50256]
        tensors[f"{name}.enc_rows"] = np.ascontiguousarray(enc[ROWS].astype(np.float32))
        tensors[f"{name}.enc_stats"] = np.array([enc.mean(), enc.std()], dtype=np.float32)
        tensors[f"{name}.greedy"] = np.array(ids, dtype=np.int32)
        meta[name] = f"{sdist}:{member}"
        print(name, enc.shape, len(ids), ids[:12], file=sys.stderr)
    meta["rows"] = json.dumps(ROWS)
    meta["prompt"] = json.dumps(PROMPT)
    meta["reference"] = f"ctranslate2 {ctranslate2.__version__} Whisper.encode/generate, compute_type float32"
    safetensors.numpy.save_file(tensors, str(out / "ct2_ref.safetensors"), metadata=meta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
