"""`saragossa serve` against hostile but valid requests, over real HTTP on a tiny fixture model:
strings with an embedded U+0000 (JSON's \\u0000) are kept whole where they are text (prompts, stop
strings, session keys) and refused where they are names (models, tools); a malformed
Content-Length gets one well-formed error; the read deadline bounds the whole request, headers
included; a logit_bias token outside the vocabulary is a 400 naming logit_bias; Ollama's listings
give a GGUF file's real quantization."""
import json
import socket
import subprocess
import sys
import time

import pytest

from server_util import KEY, ROOT, Server, free_port, make_test_model

BLOCK = 16
NUL_TEXT = "Hello\u0000 world, the quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_test_model("qwen3", tmp_path_factory.mktemp("hostile") / "qwen3", 384)


@pytest.fixture(scope="module")
def srv(model_dir):
    s = Server("--model", f"tiny={model_dir}", port=free_port(), key=KEY,
               env={"RETI_SERVE_PREFIX_BLOCK_TOKENS": str(BLOCK)})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ref_tok(model_dir):
    """The reference tokenizer (Hugging Face `tokenizers`) of the test model."""
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def ref_ids(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def post(s, path, body, headers=None):
    with s.client() as c:
        return c.post(path, json=body, headers=headers or {})


# ---- U+0000 in text: kept whole ----

def test_a_nul_in_a_tokenize_prompt_keeps_the_text_after_it(srv, ref_tok):
    want = ref_ids(ref_tok, NUL_TEXT)
    assert len(want) > 5
    r = post(srv, "/tokenize", {"model": "tiny", "prompt": NUL_TEXT})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == want
    r = post(srv, "/detokenize", {"model": "tiny", "tokens": want})
    assert r.status_code == 200 and r.json()["prompt"] == NUL_TEXT


def test_a_nul_in_a_completion_prompt_is_tokenized_whole(srv, ref_tok):
    r = post(srv, "/v1/completions", {"model": "tiny", "prompt": NUL_TEXT, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(ref_ids(ref_tok, NUL_TEXT))


def test_a_nul_in_an_ollama_generate_prompt_and_system_is_kept(srv, ref_tok):
    body = {"model": "tiny", "prompt": NUL_TEXT, "raw": True, "stream": False, "options": {"num_predict": 1}}
    r = post(srv, "/api/generate", body)
    assert r.status_code == 200, r.text
    assert r.json()["prompt_eval_count"] == len(ref_ids(ref_tok, NUL_TEXT))
    system = "Be brief\u0000 and clear, please."
    body = {"model": "tiny", "prompt": NUL_TEXT, "system": system, "stream": False, "options": {"num_predict": 1}}
    r = post(srv, "/api/generate", body)
    assert r.status_code == 200, r.text
    want = ref_ids(ref_tok, chatml([{"role": "system", "content": system}, {"role": "user", "content": NUL_TEXT}]))
    assert r.json()["prompt_eval_count"] == len(want)


def test_a_nul_in_chat_messages_is_kept_on_every_api(srv, ref_tok):
    msgs = [{"role": "user", "content": NUL_TEXT}]
    want = len(ref_ids(ref_tok, chatml(msgs)))
    r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": msgs, "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == want
    r = post(srv, "/api/chat", {"model": "tiny", "messages": msgs, "stream": False, "options": {"num_predict": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_eval_count"] == want
    # Anthropic: a string, and text blocks (each block's text whole)
    for content in (NUL_TEXT, [{"type": "text", "text": NUL_TEXT}]):
        r = post(srv, "/v1/messages/count_tokens", {"model": "tiny", "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        assert r.json()["input_tokens"] == want, content
    system = "Be brief\u0000 and clear."
    r = post(srv, "/v1/messages/count_tokens", {"model": "tiny", "system": [{"type": "text", "text": system}],
                                                 "messages": [{"role": "user", "content": NUL_TEXT}]})
    assert r.json()["input_tokens"] == len(ref_ids(ref_tok, chatml([{"role": "system", "content": system}] + msgs)))


def greedy(s, path, body):
    r = post(s, path, dict(body, temperature=0))
    assert r.status_code == 200, r.text
    return r.json()


def test_a_stop_string_holding_a_nul_is_matched_whole(srv):
    """The model never writes U+0000, so a stop string holding one never matches: cut at its NUL,
    the string's first bytes would end the answer early."""
    base = {"model": "tiny", "prompt": "Hello, world! The quick", "max_tokens": 12}
    text = greedy(srv, "/v1/completions", base)["choices"][0]["text"]
    assert text, "the fixture model answered nothing"
    stop = text[0] + "\u0000zz"
    for form in (stop, [stop]):
        got = greedy(srv, "/v1/completions", dict(base, stop=form))["choices"][0]
        assert got["text"] == text and got["finish_reason"] == "length", form
    # Ollama options.stop
    ob = {"model": "tiny", "prompt": base["prompt"], "raw": True, "stream": False,
          "options": {"num_predict": 12, "temperature": 0, "top_k": 1, "repeat_penalty": 1.0}}
    plain = post(srv, "/api/generate", ob).json()["response"]
    assert plain
    ob["options"]["stop"] = [plain[0] + "\u0000zz"]
    r = post(srv, "/api/generate", ob).json()
    assert r["response"] == plain and r["done_reason"] == "length"
    # Anthropic stop_sequences
    ab = {"model": "tiny", "max_tokens": 12, "temperature": 0, "messages": [{"role": "user", "content": "Hello"}]}
    a = post(srv, "/v1/messages", ab).json()
    atext = "".join(b["text"] for b in a["content"] if b["type"] == "text")
    assert atext
    a2 = post(srv, "/v1/messages", dict(ab, stop_sequences=[atext[0] + "\u0000zz"])).json()
    assert "".join(b["text"] for b in a2["content"] if b["type"] == "text") == atext
    assert a2["stop_reason"] == a["stop_reason"] and a2["stop_sequence"] is None


FIRST = [{"role": "system", "content": "You answer briefly and clearly, please. The quick brown fox."},
         {"role": "user", "content": "What is the capital of France? Hello, world! The quick brown fox jumps."}]


def chat_reused(s, messages, user):
    r = post(s, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0,
                                         "user": user})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], int(r.headers["x-saragossa-reused-prefix-tokens"])


def test_session_keys_that_differ_after_a_nul_do_not_share_cached_blocks(srv):
    a1, _ = chat_reused(srv, FIRST, "team\u0000alice")
    chat_reused(srv, [{"role": "user", "content": "0123456789 + - * / = ( ) [ ] { } < >"}], "someone-else")
    convo = FIRST + [{"role": "assistant", "content": a1}, {"role": "user", "content": "And Spain, please?"}]
    _, reused = chat_reused(srv, convo, "team\u0000mallory")
    assert reused == 0, "a session whose key differs only after a NUL reused another session's blocks"
    _, reused = chat_reused(srv, convo, "team")
    assert reused == 0
    _, reused = chat_reused(srv, convo, "team\u0000alice")
    assert reused >= BLOCK, "the session's own blocks are reused under its whole key"


def test_anthropic_user_ids_that_differ_after_a_nul_do_not_share_cached_blocks(srv):
    def turn(messages, uid):
        r = post(srv, "/v1/messages", {"model": "tiny", "max_tokens": 4, "temperature": 0, "messages": messages,
                                        "metadata": {"user_id": uid}})
        assert r.status_code == 200, r.text
        j = r.json()
        return "".join(b["text"] for b in j["content"] if b["type"] == "text"), j["usage"]["cache_read_input_tokens"]

    first = [{"role": "user", "content": FIRST[0]["content"] + " " + FIRST[1]["content"]}]
    a1, _ = turn(first, "org\u0000one")
    turn([{"role": "user", "content": "0123456789 + - * / = ( ) [ ] { } < >"}], "another")
    convo = first + [{"role": "assistant", "content": a1 or "ok"}, {"role": "user", "content": "And Spain?"}]
    _, cached = turn(convo, "org\u0000two")
    assert cached == 0
    _, cached = turn(convo, "org\u0000one")
    assert cached >= BLOCK


# ---- U+0000 in names: refused ----

NAME_ROUTES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    ("/tokenize", {"prompt": "hi"}),
    ("/api/generate", {"prompt": "hi", "stream": False, "options": {"num_predict": 1}}),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": False, "options": {"num_predict": 1}}),
    ("/api/show", {}),
    ("/v1/messages", {"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/embeddings", {"input": "hi"}),
    ("/api/embed", {"input": "hi"}),
]


@pytest.mark.parametrize("path,body", NAME_ROUTES, ids=[p for p, _ in NAME_ROUTES])
def test_a_model_name_with_a_nul_is_a_400_not_the_model_before_it(srv, path, body):
    r = post(srv, path, dict(body, model="tiny\u0000x"))
    assert r.status_code == 400, (r.status_code, r.text)
    e = r.json()["error"]
    msg = e if isinstance(e, str) else e["message"]
    assert "U+0000" in msg, msg
    if path.startswith("/v1/") and not path.startswith("/v1/messages"):
        assert e["param"] == "model"


def test_a_model_id_with_an_escaped_nul_in_the_url_is_not_found(srv):
    with srv.client() as c:
        assert c.get("/v1/models/tiny").status_code == 200
        r = c.get("/v1/models/tiny%00x")
        assert r.status_code == 404, r.text
        assert c.get("/health%00x").status_code == 404


TOOL = {"type": "function", "function": {"name": "get\u0000weather", "parameters": {"type": "object"}}}


def test_tool_names_with_a_nul_are_refused(srv):
    msgs = [{"role": "user", "content": "hi"}]
    r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": msgs, "tools": [TOOL], "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].function.name", r.text
    ok = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
    r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": msgs, "tools": [ok], "max_tokens": 1,
                                          "tool_choice": {"type": "function", "function": {"name": "get\u0000x"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text
    r = post(srv, "/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": msgs,
                                   "tools": [{"name": "get\u0000x", "input_schema": {"type": "object"}}]})
    assert r.status_code == 400 and "U+0000" in r.json()["error"]["message"], r.text
    r = post(srv, "/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": msgs,
                                   "tools": [{"name": "get", "input_schema": {"type": "object"}}],
                                   "tool_choice": {"type": "tool", "name": "get\u0000x"}})
    assert r.status_code == 400, r.text


def test_enumerated_values_with_a_nul_are_not_read_as_their_prefix(srv):
    bad = [
        ("/v1/chat/completions", {"messages": [{"role": "user\u0000x", "content": "hi"}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text\u0000", "text": "hi"}]}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none\u0000"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low\u0000"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "response_format": {"type": "text\u0000"}}),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "format": "json\u0000", "stream": False}),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "think": "low\u0000", "stream": False}),
        ("/v1/messages", {"max_tokens": 1, "messages": [{"role": "user\u0000", "content": "hi"}]}),
        ("/v1/messages", {"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "text\u0000",
                                                                                     "text": "hi"}]}]}),
        ("/v1/messages", {"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
                          "thinking": {"type": "disabled\u0000"}}),
    ]
    for path, body in bad:
        r = post(srv, path, dict(body, model="tiny"))
        assert r.status_code == 400, (path, body, r.status_code, r.text)


# ---- HTTP framing and the read deadline ----

@pytest.fixture
def sock_srv(tmp_path):
    path = str(tmp_path / "s.sock")
    s = Server("--read-timeout", "2", socket_path=path)
    s.path = path
    yield s
    s.stop()


def raw(path, data, wait=3.0):
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    c.settimeout(wait)
    c.sendall(data)
    got = b""
    try:
        while True:
            d = c.recv(4096)
            if not d:
                break
            got += d
    except (socket.timeout, ConnectionResetError):
        pass
    c.close()
    return got


@pytest.mark.parametrize("value,status", [(b"abc", 400), (b"12abc", 400), (b"-1", 400), (b"", 400),
                                          (b"99999999999999999999999", 413)])
def test_a_malformed_content_length_gets_one_well_formed_error(sock_srv, value, status):
    got = raw(sock_srv.path, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + value +
              b"\r\n\r\n{}")
    assert got.count(b"HTTP/1.1") == 1, got
    assert got.startswith(b"HTTP/1.1 %d " % status), got
    head, _, body = got.partition(b"\r\n\r\n")
    length = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
    assert len(length) == 1 and int(length[0].split(b":")[1]) == len(body), got
    e = json.loads(body)["error"]
    assert "Content-Length" in e["message"]
    with sock_srv.client() as c:
        assert c.get("/health").status_code == 200


def test_a_malformed_content_length_on_an_ollama_route_gets_ollamas_error(sock_srv):
    got = raw(sock_srv.path, b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}")
    assert got.count(b"HTTP/1.1") == 1 and got.startswith(b"HTTP/1.1 400 "), got
    assert isinstance(json.loads(got.partition(b"\r\n\r\n")[2])["error"], str)


def trickle(path, first, data, gap, limit):
    """Sends `first` at once, then data one byte every `gap` seconds; returns (seconds until the
    server hung up, what it sent), or (None, ...) when it was still open after `limit` seconds."""
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    t0 = time.time()
    if first:
        c.sendall(first)
    c.setblocking(False)
    got = b""

    def rest():
        try:
            return got + c.recv(4096)
        except OSError:
            return got

    try:
        for i in range(len(data)):
            if time.time() - t0 > limit:
                return None, got
            try:
                c.send(data[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.time() - t0, rest()
            end = time.time() + gap
            while time.time() < end:
                try:
                    d = c.recv(4096)
                except BlockingIOError:
                    time.sleep(0.02)
                    continue
                except ConnectionResetError:
                    return time.time() - t0, got
                if not d:
                    return time.time() - t0, got
                got += d
        return None, got
    finally:
        c.close()


def test_headers_sent_one_byte_at_a_time_are_cut_off_at_the_read_deadline(sock_srv):
    line = b"POST /v1/chat/completions HTTP/1.1\r\n"
    t, got = trickle(sock_srv.path, line, b"Host: x\r\nX-Slow: " + b"a" * 400 + b"\r\n\r\n", 0.05, 10)
    assert t is not None, "a client trickling its headers was still connected after 10 s (deadline 2 s)"
    assert t < 4, t
    assert got.startswith(b"HTTP/1.1 408 ") and b'"code":"request_timeout"' in got, got
    # the request line itself, one byte at a time: closed too
    t, got = trickle(sock_srv.path, b"", b"GET /" + b"a" * 400 + b" HTTP/1.1\r\n\r\n", 0.05, 10)
    assert t is not None and t < 4, t
    with sock_srv.client() as c:
        assert c.get("/health").status_code == 200


def test_a_slow_body_is_cut_off_at_the_deadline_that_its_slow_headers_started(sock_srv):
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "a" * 300}]}).encode()
    # headers slowly for most of the deadline (about 1.6 s), then the body slowly: the whole
    # request is bounded by 2 s, not the body alone
    line = b"POST /v1/chat/completions HTTP/1.1\r\n"
    req = b"Host: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    t, got = trickle(sock_srv.path, line, req, 0.05, 10)
    assert t is not None and t < 3, t
    assert got.startswith(b"HTTP/1.1 408 "), got


def test_a_kept_alive_connection_serves_requests_within_the_deadline(sock_srv):
    """The deadline does not cut a connection that keeps sending whole requests quickly."""
    with sock_srv.client() as c:
        t0 = time.time()
        while time.time() - t0 < 5:
            assert c.get("/health").status_code == 200
            time.sleep(0.5)


# ---- logit_bias and the listings ----

def test_a_logit_bias_token_outside_the_vocabulary_names_logit_bias(srv):
    msgs = [{"role": "user", "content": "hi"}]
    for path, extra in (("/v1/chat/completions", {"messages": msgs}), ("/v1/completions", {"prompt": "hi"})):
        r = post(srv, path, dict(extra, model="tiny", max_tokens=1, logit_bias={"384": 5}))
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert e["param"] == "logit_bias" and "384" in e["message"], e
    r = post(srv, "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 1, "logit_bias": {"383": 5}})
    assert r.status_code == 200, r.text


def test_ollama_listings_give_a_safetensors_models_weight_type(srv):
    with srv.client() as c:
        tags = c.get("/api/tags").json()["models"]
        assert tags[0]["details"]["quantization_level"] == "BF16"
        show = c.post("/api/show", json={"model": "tiny"}).json()
        assert show["details"]["quantization_level"] == "BF16"


def test_ollama_listings_give_a_gguf_files_quantization(tmp_path):
    gguf = pytest.importorskip("gguf")
    tokens = [chr(0x100 + i) for i in range(256)] + ["<|endoftext|>"]
    vocab = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(str(vocab), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3])
    w.add_token_merges([])
    w.add_eos_token_id(256)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_random_model.py"), "qwen3", "--tiny", "--layers", "2",
                        "--gguf", str(vocab), "--gguf-type", "q4_k_m", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (f,) = tmp_path.glob("qwen3-*.gguf")
    with Server("--model", f"q={f}", port=free_port(), key=KEY) as s, s.client() as c:
        tags = c.get("/api/tags").json()["models"]
        assert tags[0]["details"]["quantization_level"] == "Q4_K_M", tags
        assert tags[0]["details"]["format"] == "gguf"
        show = c.post("/api/show", json={"model": "q"}).json()
        assert show["details"]["quantization_level"] == "Q4_K_M"
