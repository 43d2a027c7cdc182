#!/usr/bin/env python3
"""Piper voice speed: saragossa vs onnxruntime on the same phoneme ids, side by side.

    python3 bench/piper_bench.py [--runs N] [--voice DIR]

For each thread count (1, 2), runs alternate between saragossa's library (build/libsaragossa.so
through ctypes: sg_tts_load once, then sg_speak on the text: phonemes by espeak-ng, streamed decoder
chunks, so its time to first audio is the first chunk's) and an onnxruntime session on the Piper
.onnx (ids in, the whole waveform out: its time to first audio is the whole sentence's). Both are
loaded once and warmed up by one run, as a server holds them. Reports medians of wall time and of
process CPU time (steadier on a shared machine), and the load average. `saragossa speak --metrics`
gives the same figures for one cold run of the CLI. The ids are Piper's own (tests/fixtures/piper/phonemes.json,
made by piper-phonemize), and saragossa's phonemizer gives the same ids for these texts.
"""
import argparse
import json
import os
import pathlib
import statistics
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXTS = ["A voice loop wants the first audio fast; streaming helps.",
         "She sells sea shells by the sea shore, doesn't she?"]


class Saragossa:
    """The public C API through ctypes: a voice loaded once, sg_speak timed per call."""

    def __init__(self, lib, voice, threads):
        import ctypes as C
        self.C = C
        self.lib = C.CDLL(lib)

        class TtsParams(C.Structure):
            _fields_ = [("backend", C.c_char_p), ("n_threads", C.c_int)]

        self.AUDIO_FN = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_float), C.c_size_t, C.c_void_p)

        class SpeakParams(C.Structure):
            _fields_ = [("voice", C.c_char_p), ("language", C.c_char_p), ("instructions", C.c_char_p),
                        ("speed", C.c_float), ("noise_scale", C.c_float), ("noise_w", C.c_float),
                        ("temperature", C.c_float), ("top_k", C.c_int), ("top_p", C.c_float), ("seed", C.c_uint64),
                        ("max_chars", C.c_size_t), ("on_audio", self.AUDIO_FN), ("user", C.c_void_p),
                        ("ref_audio", C.c_void_p), ("ref_audio_size", C.c_size_t), ("ref_text", C.c_char_p),
                        ("x_vector_only", C.c_int)]

        self.lib.sg_speak_default_params.restype = SpeakParams
        self.lib.sg_last_error.restype = C.c_char_p
        self.tts = C.c_void_p()
        tp = TtsParams(None, threads)
        if self.lib.sg_tts_load(voice.encode(), C.byref(tp), C.byref(self.tts)):
            raise SystemExit(self.lib.sg_last_error().decode())
        self.lib.sg_tts_sample_rate.argtypes = [C.c_void_p]
        self.rate = self.lib.sg_tts_sample_rate(self.tts)
        self.SpeakParams = SpeakParams

    def speak(self, text, seed):
        C = self.C
        state = {"first": None, "n": 0}
        t0 = time.perf_counter()

        def on_audio(pcm, n, user):
            if state["first"] is None:
                state["first"] = time.perf_counter() - t0
            state["n"] += n
            return 0

        cb = self.AUDIO_FN(on_audio)
        p = self.lib.sg_speak_default_params()
        p.on_audio = cb
        p.seed = seed
        c0 = time.process_time()
        t0 = time.perf_counter()
        if self.lib.sg_speak(self.tts, text.encode(), C.byref(p), None, None):
            raise SystemExit(self.lib.sg_last_error().decode())
        return {"ttfa_s": state["first"], "total_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "audio_s": state["n"] / self.rate}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--voice", default=str(pathlib.Path.home() / ".cache/saragossa/models/piper-joe"))
    ap.add_argument("--lib", default=str(ROOT / "build" / "libsaragossa.so"))
    a = ap.parse_args()
    import onnxruntime as ort

    onnx = next(pathlib.Path(a.voice).glob("*.onnx"))
    cases = {c["text"]: c["ids"] for c in json.loads((ROOT / "tests/fixtures/piper/phonemes.json").read_text())["cases"]}
    rate = json.loads(pathlib.Path(str(onnx) + ".json").read_text())["audio"]["sample_rate"]
    print(f"load average before: {os.getloadavg()[0]:.2f}; onnxruntime {ort.__version__}")
    for threads in (1, 2):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        t = time.perf_counter()
        sess = ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])
        ort_load = time.perf_counter() - t
        t = time.perf_counter()
        sgt = Saragossa(a.lib, a.voice, threads)
        sg_load = time.perf_counter() - t
        for text in TEXTS:
            ids = cases[text][0]
            feed = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
                    "scales": np.array([0.667, 1.0, 0.8], dtype=np.float32)}
            sess.run(None, feed)  # warm-up
            sgt.speak(text, 0)
            sg, ox = [], []
            for r in range(a.runs):
                sg.append(sgt.speak(text, r))
                c0, t = time.process_time(), time.perf_counter()
                wav = sess.run(None, feed)[0]
                ox.append({"total_s": time.perf_counter() - t, "cpu_s": time.process_time() - c0, "audio_s": wav.size / rate})
            med = lambda rs, k: statistics.median(r[k] for r in rs)
            print(f"threads={threads} '{text[:40]}...' ({len(ids)} ids)")
            print(f"  saragossa    load {sg_load:.3f} s  TTFA {med(sg, 'ttfa_s') * 1000:6.1f} ms  total {med(sg, 'total_s'):.3f} s"
                  f"  audio {med(sg, 'audio_s'):.2f} s  RTF {med(sg, 'total_s') / med(sg, 'audio_s'):.3f}"
                  f"  CPU {med(sg, 'cpu_s'):.3f} s (phonemes + synth)")
            print(f"  onnxruntime  load {ort_load:.3f} s  TTFA {med(ox, 'total_s') * 1000:6.1f} ms  total {med(ox, 'total_s'):.3f} s"
                  f"  audio {med(ox, 'audio_s'):.2f} s  RTF {med(ox, 'total_s') / med(ox, 'audio_s'):.3f}"
                  f"  CPU {med(ox, 'cpu_s'):.3f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
