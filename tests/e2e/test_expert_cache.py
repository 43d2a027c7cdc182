"""The expert slot cache (--expert-cache): a random-weight Qwen3-MoE (10 layers, 32 experts, top 4;
tools/make_moe_cache_model.py, written into a tmp dir) gives the same logits and greedy tokens,
bit for bit, with the cache at 10%, 50% and 100% of the experts as with every expert resident
(--expert-cache off), in a quantized GGUF and in a sharded BF16 safetensors folder; at 10% the
cache must evict (a layer's experts take all 32 slots). Faults: a file cut short or rewritten
after the load fails the request that needs an expert from it, with a message naming the file,
and the server stays up."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from server_util import Server

TOOL = ROOT / "tools" / "make_moe_cache_model.py"
PROMPT = [1, 5, 9, 33, 77, 100, 200, 3, 4, 5, 6, 7, 8, 9, 10, 11, 250, 12, 40, 41]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe")
    subprocess.run([sys.executable, str(TOOL), str(d)], check=True, capture_output=True)
    return {"gguf": d / "moe-q4k.gguf", "safetensors": d / "moe-bf16"}


def run_eval(sg, tmp_path, model, cache, *extra, env=None, tag=""):
    # the CPU unless a test names a backend (auto would take a GPU where there is one)
    if "--backend" not in extra:
        extra = ("--backend", "cpu") + extra
    out = tmp_path / f"logits-{cache.rstrip('%')}{tag}"
    r = sg("eval", "--model", str(model), "--tokens", ",".join(map(str, PROMPT)), "--logits-out", str(out),
           "--greedy", "10", "--kv", "f32", "--expert-cache", cache, *extra, env=env)
    assert r.returncode == 0, r.stderr
    return out.read_bytes(), r.stdout.split(), r.stderr


def stats(stderr):
    """hits, lookups and reads from the `experts:` line eval prints on stderr."""
    line = next(ln for ln in stderr.splitlines() if "experts:" in ln)
    hit = line.split("hit (")[1].split(")")[0].split(" of ")
    reads = int(line.split(" reads)")[0].split(" in ")[-1])
    return int(hit[0]), int(hit[1]), reads


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_cache_at_10_50_100_percent_is_bit_identical_to_resident(sg, tmp_path, models, fmt):
    ref, ref_toks, ref_err = run_eval(sg, tmp_path, models[fmt], "off")
    assert "experts:" not in ref_err
    assert len(ref) == 4 * len(PROMPT) * 320 and np.isfinite(np.frombuffer(ref, "<f4")).all()
    for cache in ("10%", "50%", "100%"):
        got, toks, err = run_eval(sg, tmp_path, models[fmt], cache)
        assert got == ref, f"{fmt} {cache}: logits differ from the resident model's"
        assert toks == ref_toks, f"{fmt} {cache}: greedy {toks} != {ref_toks}"
        hits, lookups, reads = stats(err)
        assert lookups > 0 and reads >= 3 * (lookups - hits)
        if cache == "10%":  # 32 slots for 320 experts: experts were read again after eviction
            assert reads > 3 * 32 and hits < lookups
        if cache == "100%":  # every expert read once at most
            assert reads <= 3 * 320


@pytest.mark.parametrize("env", [
    {"SARAGOSSA_EXPERT_POLICY": "lru", "SARAGOSSA_EXPERT_PREFETCH": "last"},
    {"SARAGOSSA_EXPERT_PREFETCH": "router"},
    {"SARAGOSSA_EXPERT_PREFETCH": "off", "SARAGOSSA_EXPERT_DIRECT": "0"},
    {"SARAGOSSA_EXPERT_URING": "0", "SARAGOSSA_EXPERT_PREFETCH": "router"},
], ids=["lru-last", "router", "no-prefetch-buffered", "pread"])
def test_every_policy_and_io_path_is_bit_identical_token_by_token(sg, tmp_path, models, env):
    """--chunk 1: every prompt token is a decode step, so prefetch runs at every layer."""
    ref, ref_toks, _ = run_eval(sg, tmp_path, models["gguf"], "off", "--chunk", "1")
    got, toks, err = run_eval(sg, tmp_path, models["gguf"], "10%", "--chunk", "1", env=env, tag="c1")
    assert got == ref and toks == ref_toks
    line = next(ln for ln in err.splitlines() if "experts:" in ln)
    if env.get("SARAGOSSA_EXPERT_PREFETCH") == "last":
        assert "prefetch last" in line and ", lru," in line
    if env.get("SARAGOSSA_EXPERT_PREFETCH") == "router" and "SARAGOSSA_EXPERT_URING" not in env:
        assert "prefetch router" in line
    if "SARAGOSSA_EXPERT_URING" in env or env.get("SARAGOSSA_EXPERT_PREFETCH") == "off":
        assert "prefetch off" in line


def test_router_prefetch_reads_ahead_and_is_used(sg, tmp_path, models):
    _, _, err = run_eval(sg, tmp_path, models["gguf"], "50%", "--chunk", "1", tag="pf",
                         env={"SARAGOSSA_EXPERT_PREFETCH": "router"})
    line = next(ln for ln in err.splitlines() if "experts:" in ln)
    read, used = (int(x) for x in line.split("prefetch router ")[1].split(" used")[0].split(" read "))
    assert read > 0 and 0 < used <= read


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_auto_keeps_every_expert_resident_when_the_model_fits(sg, tmp_path, models, fmt):
    """auto loads the experts deferred, then binds them as a plain load would once the planner
    finds that everything fits: no cache, the resident model's output."""
    ref, ref_toks, _ = run_eval(sg, tmp_path, models[fmt], "off")
    got, toks, err = run_eval(sg, tmp_path, models[fmt], "auto", tag="auto")
    assert "experts resident" in err and "experts:" not in err, err
    assert got == ref and toks == ref_toks


def test_a_pool_smaller_than_one_layer_is_refused(sg, models):
    r = sg("eval", "--model", str(models["gguf"]), "--tokens", "1,2", "--expert-cache", "1m")
    assert r.returncode != 0
    assert "fewer than one layer's 32 experts" in r.stderr


def test_bad_expert_cache_values_are_usage_errors(sg, models):
    for bad in ("lots", "0%", "150%", "-3g"):
        r = sg("eval", "--model", str(models["gguf"]), "--tokens", "1", "--expert-cache", bad)
        assert r.returncode == 2 and "--expert-cache" in r.stderr, bad
    r = sg("generate", "-m", str(models["gguf"]), "--prompt", "x", "--expert-cache", "nope")
    assert r.returncode == 2 and "--expert-cache" in r.stderr


def test_a_dense_model_is_refused_with_a_reason(sg, tmp_path):
    dense = ROOT / "tests" / "fixtures" / "qwen3"
    if not dense.exists():
        pytest.skip("no qwen3 fixture")
    r = sg("eval", "--model", str(dense), "--tokens", "1,2", "--expert-cache", "50%")
    assert r.returncode != 0 and "no routed experts" in r.stderr


def chat(s, text):
    with s.client(timeout=120) as c:
        return c.post("/v1/chat/completions", json={"model": "moe", "max_tokens": 6, "temperature": 0,
                                                    "messages": [{"role": "user", "content": text}]})


@pytest.mark.parametrize("fault", ["truncated", "rewritten"])
def test_a_file_changed_after_load_fails_the_request_and_the_server_lives(models, fault):
    d = Path(tempfile.mkdtemp(prefix="sg-xc-"))
    try:
        path = d / "moe.gguf"
        shutil.copy(models["gguf"], path)
        sock = str(d / "s.sock")
        # 10%: one layer's worth of slots, so every request reads experts again
        with Server("--model", f"moe={path}", "--expert-cache", "10%", socket_path=sock) as s:
            r = chat(s, "hello")
            assert r.status_code == 200, r.text
            size = path.stat().st_size
            if fault == "truncated":  # the experts are at the end: cut the last layers' off
                os.truncate(path, size - size // 4)
            else:  # same size, new bytes in the last expert stack
                with open(path, "r+b") as f:
                    f.seek(size - 4096)
                    f.write(os.urandom(4096))
            r = chat(s, "hello again, something else")
            assert r.status_code >= 500, r.text
            msg = r.json()["error"]["message"]
            assert "moe.gguf" in msg and ("changed since the model was loaded" in msg or "modified since" in msg), msg
            with s.client() as c:
                assert c.get("/health").status_code == 200
                assert c.get("/v1/models").status_code == 200
            assert s.proc.poll() is None
    finally:
        shutil.rmtree(d, ignore_errors=True)


# The reference fixtures (made by transformers, tools/make_fixtures.py) in every layout the cache
# reads: one tensor per expert (transformers 4), transformers 5's fused gate_up stack, and the
# hybrid families' MoE layers. Their experts are located at load and never copied.
PARITY = ["qwen3_moe", "qwen3_moe_stacked", "qwen3_5_moe_text", "qwen3_5_moe_text_stacked", "qwen3_next",
          "qwen3_next_stacked"]


@pytest.mark.parametrize("name", PARITY)
def test_reference_fixtures_match_the_reference_through_the_cache(sg, tmp_path, name):
    from test_parity import FIX, TOL, reference, rel_err, run_eval as parity_eval
    ids, want, greedy = reference(name)
    off, off_toks, _ = parity_eval(sg, tmp_path, name, ids, "--expert-cache", "off", "--backend", "cpu", tag="-off")
    # half the experts: one layer's (2 layers), so every step evicts
    got, toks, r = parity_eval(sg, tmp_path, name, ids, "--expert-cache", "50%", "--backend", "cpu", tag="-xc")
    assert got.tobytes() == off.tobytes() and toks == off_toks, f"{name}: the cache changed the output"
    err = rel_err(got.reshape(want.shape), want)
    assert err <= TOL, f"{name}: max |dlogit| / max |logit| = {err:.3g} > {TOL}"
    assert toks == greedy, f"{name}: greedy {toks} != reference {greedy}"
    assert "experts:" in r.stderr


def gpu(sg):
    if "GPU 0:" not in sg("doctor").stdout:
        pytest.skip("no GPU")


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_on_a_gpu_the_device_slot_cache_at_10_50_100_percent_is_bit_identical_to_resident(sg, tmp_path, models, fmt):
    """GPU group (skips without a GPU): the slots are the GPU's memory, filled from the files
    through host staging; logits and greedy tokens equal the CUDA backend's fully resident run,
    bit for bit, and the 10% pool evicts."""
    gpu(sg)
    ref, ref_toks, ref_err = run_eval(sg, tmp_path, models[fmt], "off", "--backend", "cuda", tag="cuda")
    assert "experts:" not in ref_err
    for cache in ("10%", "50%", "100%"):
        got, toks, err = run_eval(sg, tmp_path, models[fmt], cache, "--backend", "cuda", tag="cuda")
        assert "device slots" in err, err
        assert got == ref, f"{fmt} {cache}: logits differ from the resident CUDA model's"
        assert toks == ref_toks, f"{fmt} {cache}: greedy {toks} != {ref_toks}"
        hits, lookups, reads = stats(err)
        if cache == "10%":
            assert reads > 3 * 32 and hits < lookups


def test_on_a_gpu_auto_runs_a_cached_model_on_the_gpu_token_by_token(sg, tmp_path, models):
    """--backend auto takes the GPU with its slot cache; --chunk 1 makes every prompt token a
    decode step (op by op: the choices are read back at each layer), router prefetch included."""
    gpu(sg)
    ref, ref_toks, _ = run_eval(sg, tmp_path, models["gguf"], "off", "--backend", "cuda", "--chunk", "1", tag="cuda1")
    got, toks, err = run_eval(sg, tmp_path, models["gguf"], "10%", "--backend", "auto", "--chunk", "1",
                              env={"SARAGOSSA_EXPERT_PREFETCH": "router"}, tag="auto1")
    assert "device slots" in err and got == ref and toks == ref_toks
