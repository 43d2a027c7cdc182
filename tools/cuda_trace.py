#!/usr/bin/env python3
"""Cut a CUDA decode timeline into its kernels: where a decode step's time goes on the GPU, in the chain.

A build made with `make CUDA=1 CUDA_TRACE=1` records, for some blocks of every kernel that waits on the
one before (programmatic dependent launch), when the block reached its wait and when the wait returned;
`SARAGOSSA_CUDA_TRACE=FILE` writes them, with the launches recorded into graphs, when the backend closes:

    SARAGOSSA_CUDA_TRACE=/tmp/t.txt build/trace/saragossa bench --backend cuda -m MODEL -p 0 -n 64 -d 1024
    python3 tools/cuda_trace.py /tmp/t.txt

A kernel's wait returns when the kernel before it has finished, so the time from one kernel's return to
the next one's is what that kernel costs the chain (its work after the wait, its tail, and the hand-over).
The waits come in the order they returned (one table for all kernels), so a kernel's records are the run
of consecutive records of one grid and block size. The runs of each replayed graph are matched in order
to the launches the graph recorded (by grid and block size) and averaged over the replays. Printed: per
launch of the step, what it costs the chain and how long before its return its first block was waiting
(ahead: it was resident and had sent its weight loads); then the same summed per kernel name.
"""

import argparse
import collections
import re
import shutil
import subprocess
import sys


def parse(path):
    launches, waits = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if not p:
                continue
            if p[0] == "L" and len(p) >= 5:
                launches.append((int(p[1]), int(p[2]), int(p[3]), " ".join(p[4:])))
            elif p[0] == "W" and len(p) == 7:
                t0, t1, grid, block, bid, _ = (int(v) for v in p[1:])
                waits.append((t0, t1, grid, block, bid))
            else:
                raise ValueError(f"{path}:{n}: not a trace line: {line.strip()[:60]!r}")
    return launches, waits


def runs(waits):
    """consecutive records of one (grid, block) with no block twice: one kernel each"""
    out = []
    cur = None
    for t0, t1, grid, block, bid in waits:
        if cur is None or (grid, block) != cur["sig"] or bid in cur["bids"]:
            cur = {"sig": (grid, block), "bids": set(), "t0": t0, "t1": t1}
            out.append(cur)
        cur["bids"].add(bid)
        cur["t0"] = min(cur["t0"], t0)
        cur["t1"] = min(cur["t1"], t1)
    return out


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    out = res.stdout.splitlines()
    if res.returncode or len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


def short(name):
    """kernel name with its template arguments, without the parameter list and return type"""
    name = re.sub(r"^void ", "", name)
    depth, end = 0, len(name)
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            end = i
            break
    return name[:end]


def match(step, kruns):
    """kernel runs -> replays of step (a list of (grid, block, name)): [(run index, step index)]"""
    out, j = [], 0
    for i, r in enumerate(kruns):
        for d in range(len(step)):
            k = (j + d) % len(step)
            if step[k][:2] == r["sig"]:
                out.append((i, k))
                j = k + 1
                break
    return out


def analyse(launches, waits, capture=None, last=None):
    if not launches:
        raise ValueError("no launches recorded into a graph (is this a decode with graphs on?)")
    if not waits:
        raise ValueError("no waits recorded (a build without CUDA_TRACE=1, or SARAGOSSA_CUDA_PDL=0?)")
    caps = collections.Counter(c for c, _, _, _ in launches)
    if capture is None:
        capture = caps.most_common(1)[0][0]
    elif capture not in caps:
        raise ValueError(f"no capture {capture}: {sorted(caps)}")
    names = demangle(sorted({n for _, _, _, n in launches}))
    step = [(g, b, short(names[n])) for c, g, b, n in launches if c == capture]
    kruns = runs(waits)
    pairs = match(step, kruns)
    # replays: a new one where the step index goes back
    reps, cur, prev = [], [], -1
    for i, k in pairs:
        if k <= prev and cur:
            reps.append(cur)
            cur = []
        cur.append((i, k))
        prev = k
    if cur:
        reps.append(cur)
    full = collections.Counter(len(r) for r in reps)
    if not full:
        raise ValueError("no kernel run matched the recorded step")
    size = full.most_common(1)[0][0]
    good = [r for r in reps if len(r) == size]
    if last:
        good = good[-last:]
    seg = collections.defaultdict(list)
    ahead = collections.defaultdict(list)
    steps = []
    for r in good:
        for a, (i, k) in enumerate(r):
            if a + 1 < len(r):
                seg[k].append(kruns[r[a + 1][0]]["t1"] - kruns[i]["t1"])
            ahead[k].append(kruns[i]["t1"] - kruns[i]["t0"])
        steps.append(kruns[r[-1][0]]["t1"] - kruns[r[0][0]]["t1"])
    order = [k for _, k in good[0]] if good else []
    return {"capture": capture, "step": step, "replays": len(good), "runs": len(kruns), "order": order,
            "seg": seg, "ahead": ahead, "span": steps, "unmatched": len(kruns) - len(pairs)}


def mean(v):
    return sum(v) / len(v) if v else 0.0


def report(a, out=sys.stdout):
    step, order = a["step"], a["order"]
    print(f"capture {a['capture']}: {len(step)} launches recorded, {len(order)} with traced waits; "
          f"{a['replays']} replays of them averaged ({a['runs']} kernel runs, {a['unmatched']} unmatched)", file=out)
    span = mean(a["span"]) / 1000
    print(f"first traced return to last in a step: {span:.1f} us", file=out)
    print(f"{'#':>4} {'grid':>6} {'block':>5} {'chain us':>9} {'ahead us':>9}  kernel", file=out)
    tot = collections.defaultdict(lambda: [0, 0.0])
    for k in order:
        g, b, name = step[k]
        s = mean(a["seg"][k]) / 1000
        cs = f"{s:>9.2f}" if a["seg"][k] else f"{'-':>9}"  # the last: its successor is the next step's
        print(f"{k:>4} {g:>6} {b:>5} {cs} {mean(a['ahead'][k]) / 1000:>9.2f}  {name[:90]}", file=out)
        t = tot[name]
        t[0] += 1
        t[1] += s
    print("\nper kernel (summed over the step):", file=out)
    print(f"{'launches':>8} {'chain us':>9} {'share':>6}  kernel", file=out)
    for name, (n, s) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:>8} {s:>9.1f} {100 * s / span if span else 0:>5.1f}%  {name[:100]}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="the file SARAGOSSA_CUDA_TRACE named")
    ap.add_argument("--capture", type=int, help="the graph capture to take (default: the one of most launches)")
    ap.add_argument("--last", type=int, help="only the last N replays")
    args = ap.parse_args(argv)
    try:
        launches, waits = parse(args.trace)
        report(analyse(launches, waits, args.capture, args.last))
    except (OSError, ValueError) as e:
        print(f"cuda_trace: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
