#!/usr/bin/env python3
"""End-to-end transcription speed against faster-whisper, side by side in one run: the same
Whisper tiny.en weights (faster-whisper's CTranslate2 folder, which saragossa reads directly), the
same audio (tests/e2e/stt_audio.py's clips), the same decoding (language en, greedy and beam 5,
temperature fallback, 2 threads each), and the transcripts compared.

    FW_PYTHON=/path/to/venv-with-faster-whisper/bin/python bench/transcribe_vs_faster_whisper.py
        [--word-timestamps] [--beam N] [CLIP...]

--word-timestamps runs both with word timestamps (and compares the words' text and times too);
--beam N runs that beam width only (default: 1 and 5).

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
segs, _ = m.transcribe(sys.argv[2], beam_size=int(sys.argv[3]), language="en", word_timestamps=sys.argv[4] == "1")
segs = list(segs)
words = [[w.word.strip(), round(w.start, 2), round(w.end, 2)] for s in segs for w in (s.words or [])]
print(json.dumps(["".join(s.text for s in segs).strip(), words]))
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
    args = sys.argv[1:]
    words = "--word-timestamps" in args
    args = [a for a in args if a != "--word-timestamps"]
    beams = (1, 5)
    if "--beam" in args:
        i = args.index("--beam")
        beams = (int(args[i + 1]),)
        del args[i:i + 2]
    names = args or ["jfk", "long"]
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
            for beam in beams:
                a, aw, ac = run([sg, "transcribe", "-m", str(stt_audio.TINY_EN), "--threads", "2", "--beam", str(beam),
                                 "--language", "en", "--format", "verbose_json", str(wav)] +
                                (["--word-timestamps"] if words else []))
                b, bw, bc = run([fw_py, "-c", FW, str(stt_audio.TINY_EN), str(wav), str(beam), "1" if words else "0"])
                a = json.loads(a)
                aw_ = [[w["word"], round(w["start"], 2), round(w["end"], 2)] for w in a.get("words", [])]
                same = [a["text"], aw_] == json.loads(b)
                print(f"| {name} | {dur:.1f} | {beam} | {aw:.2f} | {bw:.2f} | {ac:.2f} | {bc:.2f} | {bc / ac:.2f}x | "
                      f"{aw / dur:.3f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
