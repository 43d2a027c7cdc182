"""`saragossa serve` generating with real models, driven by the official `openai` and `ollama`
clients: tiny fixture models (qwen3, llama) given a test tokenizer and ChatML template, and the
real Gemma 3 270M GGUF."""
import concurrent.futures
import json
import socket
import subprocess
import threading
import time

import httpx
import ollama
import openai
import pytest

from agent_util import oai  # noqa: F401 (fixture: the openai client on this module's srv)
from server_util import KEY, ROOT, Server, free_port, make_test_model
from test_server import BAD, check_bad


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {"qwen": make_test_model("qwen3", d / "qwen3", 384), "llama": make_test_model("llama", d / "llama", 320)}


@pytest.fixture(scope="module")
def srv(models_dir, tmp_path_factory):
    sock = str(tmp_path_factory.mktemp("sock") / "s.sock")
    s = Server("--model", f"llama={models_dir['llama']}", "--model", f"qwen={models_dir['qwen']}",
               "--ollama-port", str(free_port()), socket_path=sock, port=free_port(), key=KEY)
    yield s
    s.stop()


@pytest.fixture
def ol(srv):
    return ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})


HELLO = [{"role": "user", "content": "Hello, what is the capital of France?"}]


def test_openai_chat_non_stream_reports_length_and_usage(oai):
    r = oai.chat.completions.create(model="llama", messages=HELLO, max_tokens=8, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert ch.message.role == "assistant" and isinstance(ch.message.content, str)
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    assert r.model == "llama" and r.object == "chat.completion"


def test_openai_stream_equals_non_stream_and_ends_with_usage_chunk(oai):
    full = oai.chat.completions.create(model="llama", messages=HELLO, max_tokens=12, temperature=0)
    chunks = list(oai.chat.completions.create(model="llama", messages=HELLO, max_tokens=12, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_openai_completions_with_text_and_token_prompts(oai, srv):
    r = oai.completions.create(model="qwen", prompt="The capital of France is", max_tokens=5, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    with srv.client() as c:
        ids = c.post("/tokenize", json={"model": "qwen", "prompt": "The capital of France is"}).json()["tokens"]
    r2 = oai.completions.create(model="qwen", prompt=ids, max_tokens=5, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    stream = list(oai.completions.create(model="qwen", prompt=ids, max_tokens=5, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in stream if c.choices) == r.choices[0].text


def test_chat_logprobs_have_top_alternatives_sorted(oai):
    r = oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=6, temperature=0, logprobs=True,
                                    top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert abs(e.logprob - lps[0]) < 1e-5
        assert isinstance(e.bytes, list)


def test_completion_logprobs_legacy_shape(oai):
    r = oai.completions.create(model="qwen", prompt="Hello", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert all(len(t) <= 2 for t in lp.top_logprobs)


def test_seed_makes_sampling_repeatable(oai):
    kw = dict(model="llama", messages=HELLO, max_tokens=16, temperature=1.0, top_p=0.95)
    a = oai.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = oai.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {oai.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds never changed the sample"


def test_stop_string_cuts_the_answer(oai):
    full = oai.chat.completions.create(model="llama", messages=HELLO, max_tokens=20, temperature=0).choices[0].message.content
    cut = next((i for i in range(3, len(full) - 2) if full[i:i + 2].strip() and full.find(full[i:i + 2]) == i), None)
    if cut is None:
        pytest.skip("the fixture's greedy answer has no usable stop string")
    stop = full[cut:cut + 2]
    r = oai.chat.completions.create(model="llama", messages=HELLO, max_tokens=20, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[:cut]


def follow_up(oai, model="qwen"):
    first = oai.chat.completions.create(model=model, messages=HELLO, max_tokens=4, temperature=0)
    convo = HELLO + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And of Spain?"}]
    second = oai.chat.completions.create(model=model, messages=convo, max_tokens=4, temperature=0)
    return first, second


def test_follow_up_turn_reuses_the_earlier_turns(models_dir, tmp_path):
    """With the one-token kernels everywhere (SARAGOSSA_CPU_GEMM=0) the CPU forward is chunk-invariant,
    so the server continues from the live state: the whole first turn is reused."""
    s = Server("--model", f"qwen={models_dir['qwen']}", socket_path=str(tmp_path / "s.sock"),
               port=free_port(), key=KEY, env={"SARAGOSSA_CPU_GEMM": "0"})
    try:
        oai = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0)
        first, second = follow_up(oai)
        assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    finally:
        s.stop()


def test_follow_up_turn_with_float_weights_reuses_the_earlier_turns_with_the_gemm_on(oai):
    """bf16 weights: the default blocked GEMM sums like the one-token kernel, so the live state is
    reused as with the GEMM off, although the first turn is shorter than a cache block."""
    first, second = follow_up(oai)
    assert first.usage.prompt_tokens < 256
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1


def test_follow_up_turn_with_quantized_weights_and_the_gemm_reuses_whole_blocks_only(tmp_path):
    """A quantized GEMM sums a prefill in another order than the answer's decode steps: the live state
    is not reused (its output could differ from a cold run's), only whole prefix-cache blocks, none
    for a prompt shorter than a block."""
    q = make_test_model("qwen3_mlx_q4_g32", tmp_path / "q4", 384)
    s = Server("--model", f"q4={q}", socket_path=str(tmp_path / "s.sock"), port=free_port(), key=KEY)
    try:
        oai = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0)
        first, second = follow_up(oai, "q4")
        assert first.usage.prompt_tokens < 256
        assert second.usage.prompt_tokens_details.cached_tokens == 0
    finally:
        s.stop()


def test_prompt_over_context_is_400_naming_the_context(oai):
    long = [{"role": "user", "content": "word " * 400}]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="qwen", messages=long, max_tokens=4)
    assert "256" in str(e.value)
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"


def test_unknown_model_is_404_listing_the_models(oai):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="gpt-9", messages=HELLO, max_tokens=4)
    assert "llama" in str(e.value) and "qwen" in str(e.value)


def test_models_listing_openai_shape(oai):
    ids = [m.id for m in oai.models.list().data]
    assert ids == ["llama", "qwen"]
    assert oai.models.retrieve("qwen").id == "qwen"


def test_tokenize_matches_the_reference_tokenizer_and_detokenize_inverts_it(srv, models_dir):
    from tokenizers import Tokenizer
    ref = Tokenizer.from_file(str(models_dir["qwen"] / "tokenizer.json"))
    text = "Hello, world! The quick brown fox."
    with srv.client() as c:
        ids = c.post("/tokenize", json={"model": "qwen", "prompt": text}).json()["tokens"]
        assert ids == ref.encode(text).ids
        assert c.post("/detokenize", json={"model": "qwen", "tokens": ids}).json()["prompt"] == text
        r = c.post("/detokenize", json={"model": "qwen", "tokens": [999999]})
        assert r.status_code == 400


def test_ollama_client_chat_generate_stream_tags_show_ps(ol):
    r = ol.chat(model="llama", messages=HELLO, options={"temperature": 0, "num_predict": 6}, stream=False)
    assert r.done and r.message.role == "assistant" and r.eval_count == 6 and r.done_reason == "length"
    parts = list(ol.chat(model="llama", messages=HELLO, options={"temperature": 0, "num_predict": 6}, stream=True))
    assert "".join(p.message.content for p in parts) == r.message.content
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    g = ol.generate(model="qwen", prompt="Hello", options={"temperature": 0, "num_predict": 5})
    assert g.done and g.eval_count == 5 and g.prompt_eval_count > 0
    gs = list(ol.generate(model="qwen", prompt="Hello", options={"temperature": 0, "num_predict": 5}, stream=True))
    assert "".join(p.response for p in gs) == g.response
    raw = ol.generate(model="qwen", prompt="Hello", raw=True, options={"temperature": 0, "num_predict": 3})
    assert raw.prompt_eval_count < g.prompt_eval_count
    tags = ol.list()
    assert [m.model for m in tags.models] == ["llama", "qwen"]
    show = ol.show("qwen")
    assert show.modelinfo["context_length"] == 256
    assert [m.model for m in ol.ps().models] == ["llama", "qwen"]
    with pytest.raises(ollama.ResponseError) as e:
        ol.chat(model="nope", messages=HELLO)
    assert e.value.status_code == 404
    # format "json" is constrained decoding: tests/e2e/test_openai_tools.py


def test_ollama_port_serves_the_same_api_with_the_same_key(srv):
    port = None
    args = srv.proc.args
    port = int(args[args.index("--ollama-port") + 1])
    c = ollama.Client(host=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"})
    assert [m.model for m in c.list().models] == ["llama", "qwen"]
    r = httpx.get(f"http://127.0.0.1:{port}/api/tags")
    assert r.status_code == 401 and "error" in r.json()


def test_unix_socket_with_httpx_streams_sse(srv):
    with srv.client() as c:
        # The socket needs no key.
        c.headers.pop("Authorization", None)
        with c.stream("POST", "/v1/chat/completions", json={"model": "qwen", "messages": HELLO, "max_tokens": 5,
                                                             "temperature": 0, "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = [l for l in r.iter_lines() if l.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[1][6:])["choices"][0]["delta"]["content"] is not None


def long_stream_request(srv, max_tokens=3000, model="llama"):
    s = socket.socket(socket.AF_UNIX)
    s.connect(srv.socket)
    body = json.dumps({"model": model, "messages": HELLO, "max_tokens": max_tokens, "temperature": 1,
                       "stream": True, "logit_bias": {"3": -100, "1": -100}}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


def health(srv):
    with srv.client(timeout=5) as c:
        t0 = time.time()
        h = c.get("/health").json()
        return h, time.time() - t0


def test_health_and_models_answer_at_once_during_a_generation_and_disconnect_cancels(srv):
    s = long_stream_request(srv)
    got = s.recv(4096)
    assert got.startswith(b"HTTP/1.1 200"), got
    h, dt = health(srv)
    assert h["busy"] is True
    assert dt < 0.5
    with srv.client(timeout=5) as c:
        t0 = time.time()
        assert c.get("/v1/models").status_code == 200
        assert time.time() - t0 < 0.5
    s.close()  # the client goes away mid-stream
    t0 = time.time()
    while health(srv)[0]["busy"] and time.time() - t0 < 5:
        time.sleep(0.02)
    assert not health(srv)[0]["busy"], "the generation went on after the client left"
    assert time.time() - t0 < 2


def test_full_queue_answers_503_with_retry_after(models_dir, tmp_path):
    """One request runs, one waits (--queue 1): of 12 requests sent at once, the ones that find the
    queue full get 503 with Retry-After at once, the others complete; the server serves on."""
    with Server("--model", f"llama={models_dir['llama']}", "--queue", "1",
                socket_path=str(tmp_path / "q.sock")) as s:
        body = {"messages": HELLO, "max_tokens": 200, "temperature": 1, "logit_bias": {"3": -100, "1": -100}}

        def post(_):
            with s.client(timeout=120) as c:
                r = c.post("/v1/chat/completions", json=body)
                return r.status_code, r.headers.get("retry-after"), r.json()

        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            results = list(ex.map(post, range(12)))
        codes = [r[0] for r in results]
        assert set(codes) <= {200, 503}, codes
        assert codes.count(200) >= 1 and codes.count(503) >= 1, codes
        for code, retry, js in results:
            if code == 503:
                assert retry == "1"
                assert js["error"]["code"] == "queue_full"
        with s.client() as c:
            assert c.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2}).status_code == 200


def test_malformed_table_with_a_model_and_memory_stays_flat(srv):
    with srv.client() as c:
        for row in BAD:
            check_bad(c, *row, True)
    rss0 = srv.rss_kb()
    for _ in range(3):
        with srv.client() as c:
            for row in BAD:
                check_bad(c, *row, True)
    assert srv.rss_kb() - rss0 < 8 * 1024
    with srv.client() as c:
        assert c.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 3}).status_code == 200


def test_load_200_requests_from_8_clients(srv):
    url = f"http://127.0.0.1:{srv.port}/v1/chat/completions"
    hdr = {"Authorization": f"Bearer {KEY}"}
    rss0 = srv.rss_kb()

    def one(i):
        with httpx.Client(timeout=60, headers=hdr) as c:
            body = {"model": "qwen" if i % 2 else "llama", "messages": [{"role": "user", "content": f"request {i}"}],
                    "max_tokens": 4, "stream": bool(i % 3 == 0)}
            r = c.post(url, json=body)
            return r.status_code

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(one, range(200)))
    assert set(codes) <= {200, 503}, codes
    assert codes.count(200) >= 100
    assert srv.proc.poll() is None
    assert srv.rss_kb() - rss0 < 16 * 1024


# ---- the real Gemma 3 270M ----

@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"gemma3-270m not available: {p.stderr[-300:]}")
    path = p.stdout.split()[-1]
    sock = str(tmp_path_factory.mktemp("g") / "g.sock")
    s = Server("--model", f"gemma3={path}", "--ctx", "1024", socket_path=sock, port=free_port(), key=KEY)
    yield s
    s.stop()


def test_gemma3_chat_answers_through_openai_and_ollama(gemma):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{gemma.port}/v1", api_key=KEY, max_retries=0)
    r = c.chat.completions.create(model="gemma3", messages=[{"role": "user", "content": "What is the capital of France?"}],
                                  max_tokens=20, temperature=0)
    # The file is the base (pretrained) Gemma 3 270M: with the turn format rendered as Gemma's
    # template does, its answer is not reliably the right one; the loop and transports are what
    # this checks (the format itself: tests/e2e/test_generate_cli.py).
    assert r.choices[0].message.content.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    chunks = list(c.chat.completions.create(model="gemma3", max_tokens=20, temperature=0, stream=True,
                                            messages=[{"role": "user", "content": "What is the capital of France?"}]))
    assert "".join(x.choices[0].delta.content or "" for x in chunks if x.choices) == r.choices[0].message.content
    ol = ollama.Client(host=f"http://127.0.0.1:{gemma.port}", headers={"Authorization": f"Bearer {KEY}"})
    g = ol.chat(model="gemma3", messages=[{"role": "user", "content": "What is the capital of France?"}],
                options={"temperature": 0, "num_predict": 20})
    assert g.message.content == r.choices[0].message.content
