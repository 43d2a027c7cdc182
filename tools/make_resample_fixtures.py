#!/usr/bin/env python3
"""Writes the resampling fixtures of tests/unit/test_audio_resample.c: short clips at the rates a
voice-cloning reference clip comes in, and what the Qwen3-TTS reference (qwen-tts 0.1.1) makes of
each before its speaker encoder and speech tokenizer see it: 24 kHz mono float32.

The reference's loader (qwen_tts/inference/qwen3_tts_model.py, _load_audio_to_np and
_normalize_audio_inputs) reads the clip's bytes with soundfile as float32, averages the channels
with np.mean(axis=-1) *before* resampling, and resamples with librosa.resample(y, orig_sr, 24000),
whose default res_type 'soxr_hq' is python-soxr's soxr.resample(y, orig_sr, 24000, quality='HQ')
followed by librosa's fix_length to ceil(len(y) * (24000 / orig_sr)) (zero-padded; soxr itself gives
about round(len(y) * ratio) samples, so the padding is one zero for about half the lengths). This
script runs exactly that path on each clip.

Each case <name> is two files in tests/fixtures/resample/:
  <name>.wav      the clip (PCM-16 or IEEE float32 WAV, mono or stereo, at its rate);
  <name>.ref.f32  the reference's 24 kHz mono samples, raw little-endian float32 (length = bytes / 4).
The cases (name: rate, channels, WAV subtype, frames, signal) are in CASES below; frame counts are
chosen so that len * 24000 / rate is not a whole number (the length rule shows) and so that every
clip is longer than one 4096-frame decode block. The whole folder stays under 600 KB. A rerun writes
the same bytes but for the float WAV's PEAK chunk, where libsndfile puts the time of writing.

Needs numpy, soundfile (0.14.0, libsndfile 1.2.2), soxr (python-soxr 1.1.0, libsoxr 0.1.3) and
librosa (0.11.0); the fixtures committed were made with those versions and numpy 2.4.6.

usage: python tools/make_resample_fixtures.py [OUT_DIR]   (default tests/fixtures/resample)
"""
import io
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET = 24000

# name: (rate, channels, WAV subtype, frames, signal per channel)
CASES = {
    "chirp_16000": (16000, 1, "PCM_16", 7203, ["chirp"]),
    "bursts_16000": (16000, 1, "FLOAT", 6421, ["bursts"]),
    "sines_22050": (22050, 1, "PCM_16", 11027, ["sines"]),
    "chirp_22050": (22050, 1, "PCM_16", 8821, ["chirp"]),
    "bursts_44100": (44100, 1, "PCM_16", 18523, ["bursts"]),
    "chirp_48000": (48000, 1, "PCM_16", 20161, ["chirp"]),
    "bursts_48000": (48000, 1, "PCM_16", 19203, ["bursts"]),
    # left and right differ, so the order of mixing and resampling would show if it mattered, and a
    # left-only or summed mix is far off
    "stereo_44100": (44100, 2, "PCM_16", 17647, ["chirp", "sines"]),
}


def signal(kind, rate, n, seed):
    """float64 [n] in about [-0.8, 0.8]."""
    t = np.arange(n, dtype=np.float64) / rate
    T = n / rate
    if kind == "chirp":  # 60 Hz up to 0.45 of the rate: crosses 12 kHz (the 24 kHz Nyquist) when downsampling
        f0, f1 = 60.0, 0.45 * rate
        return 0.7 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * T) * t * t))
    if kind == "sines":  # a few partials, one above 12 kHz where the rate allows
        x = 0.3 * np.sin(2 * np.pi * 220.0 * t) + 0.2 * np.sin(2 * np.pi * 1870.0 * t + 0.4)
        x += 0.15 * np.sin(2 * np.pi * 5230.0 * t + 1.1)
        x += 0.1 * np.sin(2 * np.pi * min(13100.0, 0.47 * rate) * t + 2.0)
        return x
    if kind == "bursts":  # white noise bursts of 40-90 ms between silences (hard edges)
        rng = np.random.default_rng(seed)
        x = np.zeros(n)
        at = int(0.03 * rate)
        while at < n:
            k = int(rng.uniform(0.04, 0.09) * rate)
            x[at: at + k] = np.clip(0.25 * rng.standard_normal(min(k, n - at)), -0.8, 0.8)
            at += k + int(rng.uniform(0.03, 0.08) * rate)
        return x
    raise ValueError(kind)


def wav_bytes(frames, rate, subtype):
    import soundfile as sf
    buf = io.BytesIO()
    sf.write(buf, frames, rate, subtype=subtype, format="WAV")
    return buf.getvalue()


def reference(wav):
    """What qwen-tts 0.1.1 makes of the clip's bytes for its speaker encoder and tokenizer."""
    import librosa
    import soundfile as sf
    with io.BytesIO(wav) as f:
        audio, sr = sf.read(f, dtype="float32", always_2d=False)
    if audio.ndim > 1:
        audio = np.mean(audio, axis=-1)
    audio = audio.astype(np.float32)
    return librosa.resample(y=audio, orig_sr=int(sr), target_sr=TARGET).astype(np.float32)


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "resample"
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, (name, (rate, ch, subtype, n, kinds)) in enumerate(CASES.items()):
        assert len(kinds) == ch and n > 4096 and (n * TARGET) % rate
        frames = np.stack([signal(k, rate, n, 100 + 10 * i + c) for c, k in enumerate(kinds)], axis=1)
        wav = wav_bytes(frames if ch > 1 else frames[:, 0], rate, subtype)
        y = reference(wav)
        (out / f"{name}.wav").write_bytes(wav)
        (out / f"{name}.ref.f32").write_bytes(y.astype("<f4").tobytes())
        total += len(wav) + 4 * y.size
        print(f"{name}: {rate} Hz x{ch} {subtype}, {n} frames -> {y.size} samples at {TARGET} Hz")
    print(f"{total} bytes")


if __name__ == "__main__":
    main()
