"""The model pool and the memory guard of `saragossa serve`, with the official `openai` client:
three configured models in a pool of two (the least recently used one is evicted, answers stay
the same), RETI_SERVE_LRU=0 refusing the load with 503, and the memory guard refusing a model
that does not fit (503 with the numbers, the resident model still serving) and evicting cache
blocks before it refuses anything."""
import subprocess

import httpx
import openai
import pytest

from server_util import KEY, ROOT, Server, free_port, make_test_model

Q = [{"role": "user", "content": "Hello, what is the capital of France?"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("pool-models")
    return {"qwen": make_test_model("qwen3", d / "qwen3", 384), "llama": make_test_model("llama", d / "llama", 320),
            "mistral": make_test_model("mistral", d / "mistral", 320)}


def serve(models, names, env=None):
    args = []
    for n in names:
        args += ["--model", f"{n}={models[n]}"]
    return Server(*args, port=free_port(), key=KEY, env=env or {})


def oai(s):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0)


def answer(s, model):
    return oai(s).chat.completions.create(model=model, messages=Q, max_tokens=8, temperature=0).choices[0].message.content


def resident(s):
    with s.client() as c:
        ps = {m["name"] for m in c.get("/api/ps").json()["models"]}
        listed = {m["id"]: m["resident"] for m in c.get("/v1/models").json()["data"]}
    assert {k for k, v in listed.items() if v} == ps
    return ps


def test_pool_of_two_evicts_the_least_recently_used_model(models):
    names = ["qwen", "llama", "mistral"]
    # the reference answers, each model alone
    ref = {}
    for n in names:
        with serve(models, [n]) as s:
            ref[n] = answer(s, n)
    with serve(models, names, env={"RETI_SERVE_MODEL_POOL": "2"}) as s:
        assert resident(s) == {"qwen", "llama"}
        with s.client() as c:
            assert {m["id"] for m in c.get("/v1/models").json()["data"]} == set(names), "every configured model is listed"
        assert answer(s, "qwen") == ref["qwen"]      # llama is now the least recently used
        assert answer(s, "mistral") == ref["mistral"]
        assert resident(s) == {"qwen", "mistral"}
        assert answer(s, "llama") == ref["llama"]    # evicts qwen
        assert resident(s) == {"mistral", "llama"}
        for n in ["qwen", "mistral", "llama", "qwen"]:
            assert answer(s, n) == ref[n]
        assert len(resident(s)) == 2


def test_lru_off_refuses_to_load_past_the_pool(models):
    with serve(models, ["qwen", "llama"], env={"RETI_SERVE_MODEL_POOL": "1", "RETI_SERVE_LRU": "0"}) as s:
        assert resident(s) == {"qwen"}
        with pytest.raises(openai.APIStatusError) as e:
            answer(s, "llama")
        assert e.value.status_code == 503
        assert "RETI_SERVE_LRU" in str(e.value) and "full" in str(e.value)
        assert answer(s, "qwen")  # still serving
        assert resident(s) == {"qwen"}


def gemma_path():
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip("Gemma 3 270M is not available: " + r.stderr[-200:])
    return r.stdout.split()[-1]


def test_guard_refuses_a_model_that_does_not_fit_and_keeps_serving(models):
    big = gemma_path()  # ~250 MB of weights against a cap a few MB over the footprint
    with serve(models, ["qwen"]) as probe:
        answer(probe, "qwen")
        rss = probe.rss_kb() * 1024
    cap = rss + (48 << 20)
    m = dict(models, gemma=big)
    with serve(m, ["qwen", "gemma"], env={"RETI_SERVE_MODEL_POOL": "1", "RETI_SERVE_MEMORY_CAP_BYTES": str(cap)}) as s:
        before = answer(s, "qwen")
        with pytest.raises(openai.APIStatusError) as e:
            answer(s, "gemma")
        assert e.value.status_code == 503
        msg = str(e.value)
        assert "needs" in msg and "available" in msg and "RETI_SERVE_MEMORY_CAP_BYTES" in msg
        assert answer(s, "qwen") == before
        assert resident(s) == {"qwen"}, "nothing was evicted for a load that could never fit"
        with s.client() as c:
            assert c.get("/health").json()["pool"]["memory_guard"]["refusals"] >= 1


def test_guard_evicts_cache_blocks_before_refusing(models):
    long = "Hello, world! The quick brown fox jumps over the lazy dog. " * 6
    env = {"RETI_SERVE_PREFIX_BLOCK_TOKENS": "16", "RETI_SERVE_PREFIX_CACHE_BLOCKS": "100000",
           "RETI_SERVE_PREFIX_BLOCKS_PER_SESSION": "100000"}

    def fill(s, sessions):
        client = oai(s)
        for i in sessions:
            msgs = [{"role": "user", "content": f"{i} {long} {i}"}]
            r = client.chat.completions.create(model="qwen", messages=msgs, max_tokens=2, temperature=0,
                                               extra_headers={"x-saragossa-session": f"s{i}"})
            assert r.choices[0].finish_reason in ("length", "stop")

    with serve(models, ["qwen"], env=env) as probe:
        fill(probe, range(3))
        rss = probe.rss_kb() * 1024
        with probe.client() as c:
            per = c.get("/health").json()["pool"]["prefix_cache"]
        assert per["blocks"] > 0
        block_bytes = per["bytes"] // per["blocks"]
    # room for a few dozen blocks over the warm footprint; 60 sessions make hundreds
    env["RETI_SERVE_MEMORY_CAP_BYTES"] = str(rss + 40 * block_bytes + (2 << 20))
    with serve(models, ["qwen"], env=env) as s:
        fill(s, range(60))  # every request answered: no refusal
        with s.client() as c:
            st = c.get("/health").json()["pool"]
        assert st["memory_guard"]["evicted_blocks"] > 0, st
        assert st["memory_guard"]["refusals"] == 0, st
        assert st["prefix_cache"]["blocks"] > 0
