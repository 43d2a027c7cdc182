"""`saragossa generate` with the real Gemma 3 270M: metrics, JSON, stop strings, seeds, greedy
decoding, and the errors a user can act on (unknown model, bad flags, not enough memory, a
missing default model)."""
import json
import pathlib
import re
import subprocess

import pytest

from conftest import ROOT

# Greedy continuation of "The capital of France is": the first 8 tokens of the golden stream that
# tests/e2e/test_gemma3_real.py pins (identical in llama.cpp), detokenized.
FRANCE_8 = " the capital of the country of France."

METRIC_LINES = ("prompt tokens:", "prefill:", "time to first token:", "generated tokens:", "decode:",
                "total time:", "peak memory:")


@pytest.fixture(scope="module")
def gemma():
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"gemma3-270m not available: {p.stderr[-300:]}")
    return str(pathlib.Path(p.stdout.split()[-1]))


@pytest.fixture(scope="module")
def greedy_json(sg, gemma):
    r = sg("generate", "--model", gemma, "--prompt", "The capital of France is", "--temperature", "0",
           "--max-tokens", "8", "--json", "--metrics", timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def test_generate_greedy_json_has_text_and_every_metric(greedy_json):
    out = json.loads(greedy_json.stdout)
    assert out["text"] == FRANCE_8
    assert out["finish_reason"] == "length"
    m = out["metrics"]
    assert m["prompt_tokens"] == 6 and m["generated_tokens"] == 8
    for k in ("prefill_tokens_per_s", "time_to_first_token_s", "decode_tokens_per_s", "total_s"):
        assert m[k] > 0, k
    assert m["peak_memory_bytes"] > 100 << 20  # the weights alone are 235 MiB
    assert m["total_s"] >= m["time_to_first_token_s"]


def test_generate_metrics_prints_every_metric_on_stderr(greedy_json):
    err = greedy_json.stderr
    for line in METRIC_LINES:
        assert re.search(rf"^{line}\s+\S", err, re.M), line
    assert re.search(r"^prompt tokens:\s+6 ", err, re.M)
    assert re.search(r"^decode:\s+[0-9.]+ tok/s", err, re.M)
    assert re.search(r"^peak memory:\s+[0-9.]+ MiB", err, re.M)


def test_greedy_steps_in_the_backend_give_the_sampler_s_tokens(sg, gemma):
    # plain greedy decodes through the session's greedy step (only the argmax id comes back);
    # the kill-switch sends the logits back to the sampler: the same 24 tokens either way
    args = ("generate", "--model", gemma, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "24")
    a = sg(*args, timeout=300)
    b = sg(*args, env={"SARAGOSSA_GREEDY_IN_BACKEND": "0"}, timeout=300)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and len(a.stdout) > 40


def test_generate_streams_plain_text_and_stop_string_cuts_it(sg, gemma):
    r = sg("generate", "--model", gemma, "--prompt", "The capital of France is", "--temperature", "0",
           "--max-tokens", "8", "--stop", "country", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] == FRANCE_8[:FRANCE_8.index("country")]
    assert out["finish_reason"] == "stop"
    assert out["metrics"]["generated_tokens"] < 8


def test_generate_same_seed_same_text_at_temperature_0_8(sg, gemma):
    args = ("generate", "--model", gemma, "--prompt", "Once upon a time", "--temperature", "0.8",
            "--max-tokens", "6", "--seed", "1234")
    a, b = sg(*args, timeout=300), sg(*args, timeout=300)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and a.stdout.strip()


def test_generate_chat_uses_the_chat_template(sg, gemma):
    r = sg("generate", "--model", gemma, "--prompt", "Hi", "--system", "Be brief.", "--temperature", "0",
           "--max-tokens", "4", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    # Gemma's turn format (the file has no template of its own): the system message folded into
    # the first user turn, a newline after every role, as transformers renders Gemma's template.
    expected = "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    t = sg("tokenize", "--model", gemma, "--no-special", input=expected)
    assert t.returncode == 0, t.stderr
    assert json.loads(r.stdout)["metrics"]["prompt_tokens"] == len(t.stdout.split())


def test_generate_unknown_model_exits_1_with_the_list_hint(sg):
    r = sg("generate", "--model", "no-such-model-here", "--prompt", "x")
    assert r.returncode == 1
    assert "unknown model 'no-such-model-here'" in r.stderr and "saragossa list" in r.stderr


@pytest.mark.parametrize("args", [["--max-tokens", "-1"], ["--max-tokens", "0"], ["--temperature", "-1"],
                                  ["--top-p", "0"], ["--top-p", "1.5"], ["--seed", "x"], ["--bogus", "1"],
                                  ["--prompt"]])
def test_generate_bad_flags_are_usage_errors(sg, args):
    r = sg("generate", "--prompt", "x", *args)
    assert r.returncode == 2, (args, r.stderr)
    assert "usage: saragossa generate" in r.stderr


def test_generate_without_prompt_is_a_usage_error(sg):
    r = sg("generate", "--max-tokens", "3")
    assert r.returncode == 2 and "--prompt is required" in r.stderr


def test_generate_refuses_a_model_larger_than_the_memory_limit(sg, gemma):
    r = sg("generate", "--model", gemma, "--prompt", "x", env={"SARAGOSSA_MEM_LIMIT": "1M"})
    assert r.returncode == 1
    assert "not enough memory" in r.stderr
    assert re.search(r"weights need 2\d\d\.\d MB, 1\.0 MB allowed by SARAGOSSA_MEM_LIMIT", r.stderr), r.stderr


def test_missing_default_model_says_how_to_fetch_it(sg, tmp_path):
    env = {"SARAGOSSA_CACHE_DIR": str(tmp_path), "SARAGOSSA_DEFAULT_MODEL": ""}
    for args in (["generate", "--prompt", "x"], ["run"]):
        r = subprocess.run([sg_bin(), *args], input="hello\n", capture_output=True, text=True, env=env_with(env),
                           timeout=60)
        assert r.returncode == 1, r.stderr
        assert "make run" in r.stderr and "fetch_models.py qwen2.5-coder-0.5b" in r.stderr
        assert str(tmp_path) in r.stderr


def test_default_model_from_environment(sg, gemma, tmp_path):
    r = sg("generate", "--prompt", "The capital of France is", "--temperature", "0", "--max-tokens", "2",
           env={"SARAGOSSA_DEFAULT_MODEL": gemma, "SARAGOSSA_CACHE_DIR": str(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == FRANCE_8[:len(" the capital")] + "\n"


def sg_bin():
    from conftest import saragossa_bin
    return saragossa_bin()


def env_with(extra):
    import os
    e = dict(os.environ)
    e.update(extra)
    return e


def test_repo_not_cached_without_network_says_so(sg, tmp_path):
    r = sg("generate", "--model", "Qwen/Qwen3-0.6B", "--prompt", "x",
           env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path)})
    assert r.returncode == 1
    assert "Qwen/Qwen3-0.6B is not in the local cache and the hub is unreachable" in r.stderr


def test_unsupported_architecture_lists_the_supported_ones(sg, tmp_path):
    # A model the formats describe but no forward runs (a fixture), and an architecture no
    # format knows (a GGUF written with the reference gguf package).
    r = sg("generate", "--model", str(ROOT / "tests" / "fixtures" / "bert"), "--prompt", "x")
    assert r.returncode == 1
    assert "unsupported architecture 'bert'" in r.stderr and "llama, mistral, qwen2, qwen3" in r.stderr
    gguf = pytest.importorskip("gguf")
    import numpy as np
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = sg("generate", "--model", str(path), "--prompt", "x")
    assert r.returncode == 1
    assert "'mamba'" in r.stderr and "supported: llama" in r.stderr
