#!/usr/bin/env python3
"""End-to-end transcription speed against faster-whisper, side by side in one run: the same
Whisper tiny.en weights (faster-whisper's CTranslate2 folder, which saragossa reads directly), the
same audio (tests/e2e/stt_audio.py's clips), the same decoding (language en, greedy and beam 5,
temperature fallback, 2 threads each), and the transcripts compared.

    FW_PYTHON=/path/to/venv-with-faster-whisper/bin/python bench/transcribe_vs_faster_whisper.py [CLIP...]

Reports wall and CPU seconds (user + sys of the process, model load included for both) and the
real-time factor (wall seconds per second of audio). On a machine whose cores are shared, the CPU
time is the steadier figure."""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import stt_audio  # noqa: E402

FW = """
import json, sys, time
from faster_whisper import WhisperModel
m = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=2)
segs, _ = m.transcribe(sys.argv[2], beam_size=int(sys.argv[3]), language="en")
print(json.dumps("".join(s.text for s in segs).strip()))
"""


def run(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    fw_py = os.environ.get("FW_PYTHON")
    if not fw_py:
        sys.exit("set FW_PYTHON to a python with faster-whisper")
    names = sys.argv[1:] or ["jfk", "long"]
    clips = stt_audio.clips()
    sg = os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")
    print(f"| clip | audio s | beam | saragossa wall s | faster-whisper wall s | saragossa CPU s | faster-whisper CPU s | "
          f"speed-up (CPU) | RTF saragossa (wall) | same text |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            wav = Path(tmp) / f"{name}.wav"
            wav.write_bytes(clips[name][0])
            dur = len(stt_audio.pcm16(clips[name][0])) / 32000
            for beam in (1, 5):
                a, aw, ac = run([sg, "transcribe", "-m", str(stt_audio.TINY_EN), "--threads", "2", "--beam", str(beam),
                                 "--language", "en", str(wav)])
                b, bw, bc = run([fw_py, "-c", FW, str(stt_audio.TINY_EN), str(wav), str(beam)])
                same = a.strip() == json.loads(b)
                print(f"| {name} | {dur:.1f} | {beam} | {aw:.2f} | {bw:.2f} | {ac:.2f} | {bc:.2f} | {bc / ac:.2f}x | "
                      f"{aw / dur:.3f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
