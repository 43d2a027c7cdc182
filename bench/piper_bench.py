#!/usr/bin/env python3
"""Piper voice speed: saragossa vs onnxruntime on the same phoneme ids, side by side.

    /work/refvenv/bin/python bench/piper_bench.py [--runs N] [--voice DIR]

For each thread count (1, 2), runs alternate between `saragossa speak --metrics` (text in,
phonemes by espeak-ng, streamed decoder chunks: time to first audio is the first chunk's) and an
onnxruntime session on the Piper .onnx (ids in, the whole waveform out: its time to first audio
is the whole sentence's). Reports medians of wall time and of CPU time (CPU time is steadier on a
shared machine), and the load average. The ids are Piper's own (tests/fixtures/piper/phonemes.json,
made by piper-phonemize), and saragossa's phonemizer gives the same ids for these texts.
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXTS = ["A voice loop wants the first audio fast; streaming helps.",
         "She sells sea shells by the sea shore, doesn't she?"]


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--voice", default=str(pathlib.Path.home() / ".cache/saragossa/models/piper-joe"))
    ap.add_argument("--bin", default=str(ROOT / "build" / "saragossa"))
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
        for text in TEXTS:
            ids = cases[text][0]
            feed = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
                    "scales": np.array([0.667, 1.0, 0.8], dtype=np.float32)}
            sess.run(None, feed)  # warm-up
            sg, ox = [], []
            for _ in range(a.runs):
                c0 = child_cpu()
                p = subprocess.run([a.bin, "speak", "-m", a.voice, "--threads", str(threads), "--metrics", "--format", "f32",
                                    "-o", "-", text], capture_output=True, check=True)
                m = json.loads(p.stderr.decode().strip().splitlines()[-1])  # cpu_s: the speaking alone
                m["proc_cpu_s"] = child_cpu() - c0
                sg.append(m)
                c0, t = time.process_time(), time.perf_counter()
                wav = sess.run(None, feed)[0]
                ox.append({"total_s": time.perf_counter() - t, "cpu_s": time.process_time() - c0, "audio_s": wav.size / rate})
            med = lambda rs, k: statistics.median(r[k] for r in rs)
            print(f"threads={threads} '{text[:40]}...' ({len(ids)} ids)")
            print(f"  saragossa    load {med(sg, 'load_s'):.3f} s  TTFA {med(sg, 'ttfa_s') * 1000:6.1f} ms  total {med(sg, 'total_s'):.3f} s"
                  f"  audio {med(sg, 'audio_s'):.2f} s  RTF {med(sg, 'total_s') / med(sg, 'audio_s'):.3f}"
                  f"  synth CPU {med(sg, 'cpu_s'):.3f} s (phonemes + synth; whole process {med(sg, 'proc_cpu_s'):.3f} s)")
            print(f"  onnxruntime  load {ort_load:.3f} s  TTFA {med(ox, 'total_s') * 1000:6.1f} ms  total {med(ox, 'total_s'):.3f} s"
                  f"  audio {med(ox, 'audio_s'):.2f} s  RTF {med(ox, 'total_s') / med(ox, 'audio_s'):.3f}"
                  f"  synth CPU {med(ox, 'cpu_s'):.3f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
