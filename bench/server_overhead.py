#!/usr/bin/env python3
"""What `saragossa serve` adds to a request: the client's wall time for a one-token generation minus
the generation's own time as the server measured it in-process (Ollama's total_duration: prefill +
first token, no HTTP, no parsing, no templating). Over the Unix socket and loopback TCP.

    .venv/bin/python bench/server_overhead.py MODEL [--n 50]

MODEL is anything `serve --model` takes (a .gguf, a folder, a repo id). Prints the median and p90
of the added milliseconds; the target is < 5 ms.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from server_util import KEY, Server, free_port  # noqa: E402


def measure(client, n):
    added, ttft_server = [], []
    body = {"model": "m", "prompt": "The capital of France is", "raw": True, "stream": False,
            "options": {"num_predict": 1, "temperature": 0}}
    client.post("/api/generate", json=body)  # warm-up
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.post("/api/generate", json=body)
        wall = time.perf_counter() - t0
        r.raise_for_status()
        inproc = r.json()["total_duration"] / 1e9
        added.append((wall - inproc) * 1e3)
        ttft_server.append(inproc * 1e3)
    return added, ttft_server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=50)
    a = ap.parse_args()
    sock = f"/tmp/sg-bench-{os.getpid()}.sock"
    with Server("--model", f"m={a.model}", "-q", socket_path=sock, port=free_port(), key=KEY) as s:
        for name, auth in (("unix socket", False), ("loopback TCP", True)):
            if name == "unix socket":
                c = s.client(timeout=120, auth=False)
            else:
                import httpx
                c = httpx.Client(base_url=f"http://127.0.0.1:{s.port}", timeout=120,
                                 headers={"Authorization": f"Bearer {KEY}"})
            with c:
                added, inproc = measure(c, a.n)
            q = statistics.quantiles(added, n=10)
            print(f"{name:13s} in-process ttft {statistics.median(inproc):8.2f} ms   "
                  f"server adds: median {statistics.median(added):6.2f} ms, p90 {q[8]:6.2f} ms "
                  f"({'ok' if statistics.median(added) < 5 else 'OVER the 5 ms target'})")


if __name__ == "__main__":
    main()
