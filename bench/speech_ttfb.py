"""Time to first byte of POST /v1/audio/speech, streamed (the default: chunked, the first bytes
leave when the first sentence's first audio chunk exists) against the whole file at once
("stream": false), for a three-sentence input with the Piper voice (en_US-joe-medium), through a
real `saragossa serve` on a Unix socket. Each run alternates the two modes so that the machine's
load hits both alike; prints the medians, the load average before and after, and the process CPU
time per request.

  .venv/bin/python bench/speech_ttfb.py [--runs 7] [--format pcm]"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from server_util import Server  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog. "
        "It was a bright cold day in April, and the clocks were striking thirteen. "
        "Call me Ishmael.")
VOICE = Path(os.environ.get("SARAGOSSA_CACHE_DIR", Path.home() / ".cache" / "saragossa")) / "models" / "piper-joe"


def one(h, fmt, stream):
    t0 = time.perf_counter()
    first = None
    n = 0
    with h.stream("POST", "/v1/audio/speech", json={"model": "joe", "voice": "alloy", "input": TEXT,
                                                    "response_format": fmt, "stream": stream}) as r:
        assert r.status_code == 200, r.read()
        for b in r.iter_raw():
            if first is None:
                first = time.perf_counter() - t0
            n += len(b)
    return first, time.perf_counter() - t0, n


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--format", default="pcm")
    ap.add_argument("--threads", default="")
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    s = Server("--tts-model", f"joe={VOICE}", socket_path=f"{d}/s.sock")
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=s.socket), base_url="http://sg", timeout=120) as h:
            one(h, a.format, True)  # warm-up: weights paged in, espeak-ng data read
            load0 = os.getloadavg()
            res = {True: [], False: []}
            c0 = cpu_s(s.proc.pid)
            for _ in range(a.runs):
                for stream in (True, False):
                    res[stream].append(one(h, a.format, stream))
            cpu = (cpu_s(s.proc.pid) - c0) / (2 * a.runs)
            load1 = os.getloadavg()
    finally:
        s.stop()
    print(f"format {a.format}, {a.runs} runs each, load average {load0[0]:.1f} before, {load1[0]:.1f} after; "
          f"server CPU {cpu:.2f} s per request")
    for stream in (True, False):
        ttfb = statistics.median(r[0] for r in res[stream])
        total = statistics.median(r[1] for r in res[stream])
        print(f"  {'streamed' if stream else 'whole   '}: first byte {ttfb * 1000:7.1f} ms (median; min "
              f"{min(r[0] for r in res[stream]) * 1000:.1f}), whole answer {total * 1000:7.1f} ms, {res[stream][0][2]} bytes")
    st = statistics.median(r[0] for r in res[True])
    wh = statistics.median(r[0] for r in res[False])
    print(f"  ratio whole / streamed first byte: {wh / st:.2f}")


if __name__ == "__main__":
    main()
