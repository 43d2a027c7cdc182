"""tools/cuda_trace.py: cutting a recorded decode timeline (the file a CUDA_TRACE=1 build writes) into
its kernels, matched to the launches the graph recorded, and its clear errors. The timeline itself needs
a GPU; these traces are written here with known times."""
import subprocess
import sys
from pathlib import Path

from tool_util import load_tool

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "cuda_trace.py"


def load():
    return load_tool("cuda_trace")


# one step: norm (8 blocks of 512), gemv (512 blocks of 128), attn (64 of 128), gemv again, argmax
STEP = [(8, 512, "_Z4normPKf"), (512, 128, "_Z4gemvPKf"), (64, 128, "_Z4attnPKf"), (512, 128, "_Z4gemvPKf"),
        (1, 1024, "_Z6argmaxPKf")]
# what each kernel costs the chain, ns (the last one's is the gap to the next step)
COST = [2000, 9000, 5000, 7000, 30000]


def write_trace(path, replays=3, other_capture=True, drop=None):
    lines = []
    if other_capture:  # a smaller graph (the candidates step), recorded first
        lines += ["L 1 8 512 _Z4normPKf", "L 1 1 1024 _Z4topkPKf"]
    lines += [f"L 7 {g} {b} {n}" for g, b, n in STEP]
    # an op-by-op step before the replays: the same kernels without a graph
    t = 1_000_000
    for rep in range(replays + 1):
        for k, (g, b, _) in enumerate(STEP):
            if drop is not None and k == drop:
                t += COST[k]
                continue
            bids = sorted({0, 1, g - 1} | set(range(0, g, 64)))
            for i, bid in enumerate(bids):
                lines.append(f"W {t - 1500 + 10 * i} {t + 30 * i} {g} {b} {bid} {bid % 132}")
            t += COST[k]
    path.write_text("\n".join(lines) + "\n")


def test_kernels_cut_and_matched(tmp_path):
    m = load()
    p = tmp_path / "t.txt"
    write_trace(p)
    a = m.analyse(*m.parse(p))
    assert a["capture"] == 7
    assert a["order"] == [0, 1, 2, 3, 4]
    assert a["replays"] == 4
    for k in range(4):
        assert m.mean(a["seg"][k]) == COST[k]
    assert not a["seg"][4]  # the last one's successor is the next step's
    assert m.mean(a["ahead"][1]) == 1500
    assert m.mean(a["span"]) == sum(COST[:4])


def test_same_kernel_twice_in_a_row_is_two_runs(tmp_path):
    m = load()
    waits = [(0, 100, 512, 128, 0), (0, 120, 512, 128, 64), (0, 5000, 512, 128, 0), (0, 5020, 512, 128, 511)]
    r = m.runs(waits)
    assert [x["t1"] for x in r] == [100, 5000]


def test_kernel_without_wait_is_skipped(tmp_path):
    m = load()
    p = tmp_path / "t.txt"
    write_trace(p, drop=2)  # the attention never waits: the gemv before it costs the chain both
    a = m.analyse(*m.parse(p))
    assert a["order"] == [0, 1, 3, 4]
    assert m.mean(a["seg"][1]) == COST[1] + COST[2]


def test_report_prints_the_sum_per_kernel(tmp_path, capsys):
    m = load()
    p = tmp_path / "t.txt"
    write_trace(p)
    assert m.main([str(p)]) == 0
    out = capsys.readouterr().out
    gemv = [ln for ln in out.splitlines() if ln.strip().startswith("2 ") and "gemv" in ln]
    assert gemv and float(gemv[0].split()[1]) == (COST[1] + COST[3]) / 1000


def test_clear_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("L 7 8 512 k\nX nonsense\n")
    r = subprocess.run([sys.executable, str(TOOL), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "bad.txt:2: not a trace line" in r.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("L 7 8 512 k\n")
    r = subprocess.run([sys.executable, str(TOOL), str(empty)], capture_output=True, text=True)
    assert r.returncode == 1 and "no waits recorded" in r.stderr
    r = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "missing.txt")], capture_output=True, text=True)
    assert r.returncode == 1 and "cuda_trace:" in r.stderr
