#!/usr/bin/env python3
"""Writes the log-mel reference fixtures of tests/e2e/test_audio.py with the reference feature
extractor (transformers' WhisperFeatureExtractor, its numpy path: no torch needed).

Each case is one tests/fixtures/audio/mel_<name>.npz holding
  frames: float32 [n_mels][F], the reference's first F frames (those the signal reaches, plus 3);
  tail:   float32 [n_mels][8], its last 8 frames (for the 30.5 s case: the trimmed window's end);
  rest:   float32 scalar, the value of every frame between them (silence: all one value), or NaN
          when those frames are not all equal (then the test checks frames and tail only);
  signal: float32 [n], only for the noise (the other signals are rebuilt by signal() below).
Kept small: a few short signals, well under 1 MB in all.

usage: .venv/bin/python tools/make_audio_fixtures.py [OUT_DIR]   (default tests/fixtures/audio)
"""
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
RATE = 16000

# name: (n_mels, seconds)
CASES = {
    "sine": (80, 1.0),      # 440 Hz cosine (non-zero at t = 0, so the reflect padding shows)
    "chirp": (80, 1.5),     # 100 Hz -> 6 kHz sweep
    "noise": (80, 0.5),     # white noise, seeded
    "chirp128": (128, 1.5),  # the large-v3 filterbank
    "long": (80, 30.5),     # past 30 s: trimmed, the window's end reflect-padded with real signal
}


def signal(name, seconds):
    """The float32 test signal; the test rebuilds the same for every case but the noise."""
    t = np.arange(int(seconds * RATE), dtype=np.float64) / RATE
    if name == "sine":
        x = 0.5 * np.cos(2 * np.pi * 440.0 * t)
    elif name in ("chirp", "chirp128"):
        f0, f1 = 100.0, 6000.0
        x = 0.3 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t * t))
    elif name == "long":
        x = 0.25 * np.sin(2 * np.pi * 300.0 * t) * (1.0 + 0.5 * np.sin(2 * np.pi * 0.7 * t))
    elif name == "noise":
        x = 0.1 * np.random.default_rng(39).standard_normal(t.size)
    else:
        raise ValueError(name)
    return x.astype(np.float32)


def reference(x, n_mels):
    from transformers import WhisperFeatureExtractor  # here: the test imports signal() without it
    fe = WhisperFeatureExtractor(feature_size=n_mels)
    return fe(x, sampling_rate=RATE, return_tensors="np")["input_features"][0].astype(np.float32)


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "audio"
    out.mkdir(parents=True, exist_ok=True)
    for name, (n_mels, seconds) in CASES.items():
        x = signal(name, seconds)
        mel = reference(x, n_mels)
        assert mel.shape == (n_mels, 3000), mel.shape
        f = min(3000 - 8, len(x) // 160 + 3) if len(x) < 480000 else 8
        mid = mel[:, f:-8]
        rest = np.float32(mid.flat[0]) if mid.size and np.all(mid == mid.flat[0]) else np.float32("nan")
        extra = {"signal": x} if name == "noise" else {}
        np.savez_compressed(out / f"mel_{name}.npz", frames=mel[:, :f], tail=mel[:, -8:], rest=rest, **extra)
        print(f"{name}: {n_mels} mels, {len(x)} samples, {f} head frames, rest {rest}")


if __name__ == "__main__":
    main()
