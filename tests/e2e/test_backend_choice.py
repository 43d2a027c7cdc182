"""Where a model runs: --backend cpu|cuda|auto and SARAGOSSA_BACKEND (default auto).

auto takes the GPU only when this build has CUDA, a GPU is usable and it takes the model; on a
machine without one (CI) it must run on the CPU silently and give the CPU's numbers bit for bit.
"""
import numpy as np

from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "qwen3"
TOKENS = "5,17,101,33,7"


def logits(sg, tmp_path, tag, *extra, env=None):
    out = tmp_path / f"{tag}.f32"
    r = sg("eval", "--model", str(FIX), "--tokens", TOKENS, "--logits-out", str(out), "--greedy", "4", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4"), r


def has_gpu(sg):
    r = sg("doctor")
    return "GPU 0:" in r.stdout


def test_auto_default_and_flag_agree_with_cpu(sg, tmp_path):
    cpu, rc = logits(sg, tmp_path, "cpu", "--backend", "cpu")
    flag, rf = logits(sg, tmp_path, "flag", env={"SARAGOSSA_BACKEND": "cpu"})
    assert np.array_equal(cpu, flag)
    if has_gpu(sg):
        return  # auto picks the GPU there: other summation orders (tests/e2e/test_parity.py covers it)
    auto, ra = logits(sg, tmp_path, "auto", "--backend", "auto")
    default, rd = logits(sg, tmp_path, "default")
    assert np.array_equal(cpu, auto) and np.array_equal(cpu, default)
    assert rc.stdout == ra.stdout == rd.stdout
    assert "GPU" not in ra.stderr and "GPU" not in rd.stderr  # no GPU: the CPU, quietly


def test_unknown_backend_is_a_clear_error(sg):
    r = sg("eval", "--model", str(FIX), "--tokens", TOKENS, "--backend", "tpu")
    assert r.returncode != 0 and "backend 'tpu'" in r.stderr
    r = sg("eval", "--model", str(FIX), "--tokens", TOKENS, env={"SARAGOSSA_BACKEND": "tpu"})
    assert r.returncode != 0 and "backend 'tpu'" in r.stderr
    r = sg("generate", "--model", str(FIX), "--prompt", "x", "--backend", "gpu")
    assert r.returncode == 2 and "--backend wants cpu, cuda or auto" in r.stderr


def test_cuda_without_a_gpu_names_the_reason(sg):
    if has_gpu(sg):
        return
    r = sg("eval", "--model", str(FIX), "--tokens", TOKENS, "--backend", "cuda")
    assert r.returncode != 0
    assert "cuda" in r.stderr.lower()


def test_serve_takes_backend(sg, tmp_path):
    r = sg("serve", "--backend", "tpu", "--socket", str(tmp_path / "a.sock"), "--model", f"a={FIX}")
    assert r.returncode == 2 and "--backend wants cpu, cuda or auto" in r.stderr
    if has_gpu(sg):
        return
    # no GPU: asking for cuda fails at the load with the reason, it does not serve on the CPU
    r = sg("serve", "--backend", "cuda", "--socket", str(tmp_path / "b.sock"), "--model", f"a={FIX}")
    assert r.returncode != 0 and "cuda" in r.stderr.lower() and "model 'a'" in r.stderr


def test_chunk_and_kv_defaults_by_backend_on_the_cpu(sg):
    # SARAGOSSA_CHUNK=0 (the default) is 256 tokens on the CPU (1024 on CUDA); KV auto is f32
    # on the CPU (f16 on a GPU)
    big = ROOT / "tests" / "fixtures" / "llama"  # a context long enough not to cap the chunk
    r = sg("bench", "-m", str(big), "-p", "1100", "-n", "1", "-r", "1", "--backend", "cpu",
           env={"SARAGOSSA_KV_TYPE": "auto"})
    assert r.returncode == 0, r.stderr
    assert "chunk 256, kv f32" in r.stdout, r.stdout
    r = sg("bench", "-m", str(big), "-p", "300", "-n", "1", "-r", "1", "--backend", "cpu",
           env={"SARAGOSSA_KV_TYPE": "f16", "SARAGOSSA_CHUNK": "64"})
    assert r.returncode == 0, r.stderr
    assert "chunk 64, kv f16" in r.stdout, r.stdout


def test_bench_reports_the_time_to_first_token_of_its_prompt(sg):
    # ttft@pP: the prefill of the pp prompt plus the first token's argmax, in ms; it cannot be
    # shorter than the prefill the pp line implies
    import re
    r = sg("bench", "-m", str(ROOT / "tests" / "fixtures" / "llama"), "-p", "96", "-n", "2", "-r", "2", "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    pp = re.search(r"^pp96\s+([\d.]+)", r.stdout, re.M)
    ttft = re.search(r"^ttft@p96\s+([\d.]+) ms", r.stdout, re.M)
    assert pp and ttft, r.stdout
    assert float(ttft.group(1)) > 0
    assert float(ttft.group(1)) >= 0.5 * 96 / float(pp.group(1)) * 1e3, r.stdout
