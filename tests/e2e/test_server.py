"""`saragossa serve` as a real process: transports and auth, the malformed-request table, and
(once the build can run models) generation through the official OpenAI and Ollama clients on a
tiny fixture model with a test tokenizer."""
import json
import os
import socket
import stat
import subprocess
import threading
import time

import httpx
import pytest

from server_util import KEY, Server, free_port, make_test_model, saragossa_bin


@pytest.fixture
def sock_path(tmp_path):
    return str(tmp_path / "s.sock")


# ---- transports and auth ----

def test_unix_socket_is_created_mode_0600_and_removed_on_exit(sock_path):
    with Server(socket_path=sock_path) as s:
        st = os.stat(sock_path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        with s.client() as c:
            assert c.get("/health").json()["status"] == "ok"
    assert not os.path.exists(sock_path)


def test_stale_socket_is_replaced_and_live_one_refused(sock_path):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock_path)
    stale.close()  # the file stays, nobody listens: stale
    with Server(socket_path=sock_path):
        r = subprocess.run([saragossa_bin(), "serve", "--socket", sock_path], capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 1
        assert "another server is listening" in r.stderr


def test_a_regular_file_at_the_socket_path_is_not_replaced(tmp_path):
    p = tmp_path / "notasocket"
    p.write_text("precious")
    r = subprocess.run([saragossa_bin(), "serve", "--socket", str(p)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "not a socket" in r.stderr
    assert p.read_text() == "precious"


def test_tcp_without_key_refuses_to_start():
    env = dict(os.environ)
    env.pop("SARAGOSSA_API_KEY", None)
    for args in (["--port", str(free_port())], ["--port", str(free_port()), "--host", "0.0.0.0"],
                 ["--ollama-port", str(free_port())]):
        r = subprocess.run([saragossa_bin(), "serve", *args], capture_output=True, text=True, timeout=20, env=env)
        assert r.returncode == 2, r.stderr
        assert "API key" in r.stderr


def test_api_key_from_environment_enables_tcp():
    port = free_port()
    with Server(port=port, env={"SARAGOSSA_API_KEY": KEY}) as s:
        s.key = KEY
        with s.client() as c:
            assert c.get("/v1/models").status_code == 200


ROUTES = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
          ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/api/chat"), ("POST", "/api/generate"),
          ("GET", "/api/tags"), ("POST", "/api/show"), ("GET", "/api/ps"), ("GET", "/api/version"),
          ("POST", "/api/embed"), ("GET", "/v1/models/x"), ("GET", "/nowhere")]


@pytest.fixture(scope="module")
def tcp_server():
    with Server(port=free_port(), key=KEY, env={"SARAGOSSA_LOG": "error"}) as s:
        yield s


def test_missing_or_wrong_token_gets_401_on_every_route_but_health(tcp_server):
    for auth in (None, "Bearer wrong", "Bearer " + KEY[:-1], "Bearer " + KEY + "x", "Basic " + KEY, KEY):
        with tcp_server.client(auth=False) as c:
            h = {"Authorization": auth} if auth else {}
            assert c.get("/health", headers=h).status_code == 200
            for method, path in ROUTES:
                r = c.request(method, path, headers=h, content=b"{}")
                assert r.status_code == 401, (auth, method, path, r.text)
                body = r.json()
                if path.startswith("/api/"):
                    assert isinstance(body["error"], str)
                else:
                    assert body["error"]["type"] == "authentication_error"
                    assert body["error"]["code"] == "invalid_api_key"
    with tcp_server.client() as c:
        assert c.get("/v1/models").status_code == 200
        assert c.get("/api/version").json()["version"]


# ---- the malformed-request table ----

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def chat(**kw):
    return json.dumps({"messages": MSG, **kw}).encode()


# (method, path, body, status, what the error must mention). status "ok": a well-formed request
# (200 with a model, 404 "model not found" without one).
BAD = [
    ("POST", CHAT, b"{", 400, "invalid JSON at line 1"),
    ("POST", CHAT, b"not json", 400, "invalid JSON"),
    ("POST", CHAT, b"", 400, "empty"),
    ("POST", CHAT, b"[]", 400, "JSON object"),
    ("POST", CHAT, b'"text"', 400, "invalid JSON"),
    ("POST", CHAT, b'{"messages": [], }', 400, "column"),
    ("POST", CHAT, json.dumps({"messages": "hi"}).encode(), 400, "messages"),
    ("POST", CHAT, json.dumps({"messages": []}).encode(), 400, "messages"),
    ("POST", CHAT, json.dumps({}).encode(), 400, "messages"),
    ("POST", CHAT, json.dumps({"messages": [1]}).encode(), 400, "messages[0]"),
    ("POST", CHAT, json.dumps({"messages": [{"content": "x"}]}).encode(), 400, "messages[0].role"),
    ("POST", CHAT, json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "wizard"),
    ("POST", CHAT, json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), 400, "messages[0].content"),
    ("POST", CHAT, json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}).encode(),
     400, "image_url"),
    ("POST", CHAT, json.dumps({"messages": [{"role": "user", "content": [{"type": "text"}]}]}).encode(), 400, ".text"),
    ("POST", CHAT, chat(max_tokens=-1), 400, "max_tokens"),
    ("POST", CHAT, chat(max_tokens=0), 400, "max_tokens"),
    ("POST", CHAT, chat(max_tokens="10"), 400, "max_tokens"),
    ("POST", CHAT, chat(max_tokens=1e30), 400, "max_tokens"),
    ("POST", CHAT, chat(max_completion_tokens=-5), 400, "max_completion_tokens"),
    ("POST", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 99999999999999999999999}', 400,
     "invalid JSON"),
    ("POST", CHAT, chat(temperature="hot"), 400, "temperature"),
    ("POST", CHAT, chat(temperature=-1), 400, "temperature"),
    ("POST", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e400}', 400, "invalid JSON"),
    ("POST", CHAT, chat(top_p=0), 400, "top_p"),
    ("POST", CHAT, chat(top_p=2), 400, "top_p"),
    ("POST", CHAT, chat(top_k=1.5), 400, "top_k"),
    ("POST", CHAT, chat(min_p=2), 400, "min_p"),
    ("POST", CHAT, chat(n=17), 400, "'n'"),
    ("POST", CHAT, chat(stop=5), 400, "stop"),
    ("POST", CHAT, chat(stop=[1]), 400, "stop[0]"),
    ("POST", CHAT, chat(stop=["a"] * 17), 400, "stop"),
    ("POST", CHAT, chat(logit_bias=[]), 400, "logit_bias"),
    ("POST", CHAT, chat(logit_bias={"abc": 1}), 400, "logit_bias"),
    ("POST", CHAT, chat(logit_bias={"1": 500}), 400, "logit_bias"),
    ("POST", CHAT, chat(logprobs="yes"), 400, "logprobs"),
    ("POST", CHAT, chat(logprobs=True, top_logprobs=30), 400, "top_logprobs"),
    ("POST", CHAT, chat(top_logprobs=5), 400, "top_logprobs"),
    ("POST", CHAT, chat(stream="yes"), 400, "stream"),
    ("POST", CHAT, chat(stream_options=5), 400, "stream_options"),
    ("POST", CHAT, chat(seed="x"), 400, "seed"),
    ("POST", CHAT, chat(presence_penalty=3), 400, "presence_penalty"),
    ("POST", CHAT, chat(frequency_penalty=[1]), 400, "frequency_penalty"),
    ("POST", CHAT, chat(model=5), 400, "model"),
    ("POST", CHAT, chat(user=5), 400, "user"),
    ("POST", CHAT, chat(response_format="json"), 400, "response_format"),
    ("POST", CHAT, chat(response_format={"type": "yaml"}), 400, "response_format.type"),
    ("POST", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "invalid JSON"),
    ("POST", CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, "invalid JSON"),
    ("POST", CHAT, chat(max_tokens=4, some_extension={"deep": [1, {"x": None}]}, another=-1e300), "ok", ""),
    ("POST", CHAT, chat(max_tokens=2**31 + 5), 400, "max_tokens"),
    ("POST", "/v1/completions", json.dumps({}).encode(), 400, "prompt"),
    ("POST", "/v1/completions", json.dumps({"prompt": 5}).encode(), 400, "prompt"),
    ("POST", "/v1/completions", json.dumps({"prompt": [[1, 2], [3]]}).encode(), 400, "batch"),
    ("POST", "/v1/completions", json.dumps({"prompt": [-1]}).encode(), 400, "prompt[0]"),
    ("POST", "/v1/completions", json.dumps({"prompt": []}).encode(), 400, "prompt"),
    ("POST", "/v1/completions", json.dumps({"prompt": "x", "echo": True}).encode(), 400, "echo"),
    ("POST", "/v1/completions", json.dumps({"prompt": "x", "logprobs": 50}).encode(), 400, "logprobs"),
    ("POST", "/api/chat", json.dumps({}).encode(), 400, "'model' is required"),
    ("POST", "/api/chat", json.dumps({"model": "m", "messages": "hi"}).encode(), 400, "messages"),
    ("POST", "/api/chat", json.dumps({"model": "m", "messages": MSG, "stream": 1}).encode(), 400, "stream"),
    ("POST", "/api/chat", json.dumps({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}).encode(),
     400, "images"),
    ("POST", "/api/generate", json.dumps({"model": 5}).encode(), 400, "model"),
    ("POST", "/api/generate", json.dumps({"model": "m", "options": []}).encode(), 400, "options"),
    ("POST", "/api/generate", json.dumps({"model": "m", "options": {"temperature": "hot"}}).encode(), 400,
     "options.temperature"),
    ("POST", "/api/generate", json.dumps({"model": "m", "options": {"num_predict": 0}}).encode(), 400, "num_predict"),
    ("POST", "/api/generate", json.dumps({"model": "m", "format": 5}).encode(), 400, "format"),
    ("POST", "/api/generate", json.dumps({"model": "m", "keep_alive": [1]}).encode(), 400, "keep_alive"),
    ("POST", "/api/generate", b"{,}", 400, "invalid JSON"),
    ("POST", "/api/embed", json.dumps({"model": "m", "input": "x"}).encode(), 404, "model 'm' not found"),
    ("POST", "/api/embeddings", json.dumps({"model": "m", "prompt": "x"}).encode(), 404, "model 'm' not found"),
    ("POST", "/api/embed", json.dumps({"input": "x"}).encode(), 400, "model"),
    ("POST", "/api/embed", json.dumps({"model": "m", "input": 5}).encode(), 400, "'input' must be a string"),
    ("POST", "/v1/embeddings", json.dumps({"model": "m", "input": "x"}).encode(), 404, "model 'm' not found"),
    ("POST", "/v1/embeddings", json.dumps({"model": "m", "input": ""}).encode(), 400, "empty string"),
    ("POST", "/v1/rerank", json.dumps({"model": "m", "query": "q", "documents": []}).encode(), 400, "empty array"),
    ("POST", "/v1/embeddings", b"[1]", 400, "JSON object"),
    ("POST", "/api/show", json.dumps({}).encode(), 400, "model"),
    ("POST", "/tokenize", json.dumps({}).encode(), 400, "prompt"),
    ("POST", "/tokenize", json.dumps({"prompt": 5}).encode(), 400, "prompt"),
    ("POST", "/detokenize", json.dumps({"tokens": "x"}).encode(), 400, "tokens"),
    ("POST", "/detokenize", json.dumps({"tokens": [1, "a"]}).encode(), 400, "tokens[1]"),
    ("GET", "/nope", None, 404, "no route"),
    ("GET", "/api/nope", None, 404, "no route"),
    ("PUT", CHAT, b"{}", 405, "POST"),
    ("GET", CHAT, None, 405, "POST"),
    ("GET", "/api/chat", None, 405, "POST"),
    ("DELETE", "/v1/models", None, 405, "GET"),
    ("POST", CHAT, b'{"messages": "' + b"a" * (10 << 20) + b'"}', 413, "limit"),
]


def check_bad(c, method, path, body, status, mention, have_model):
    r = c.request(method, path, content=body, headers={"Content-Type": "application/json"})
    if status == "ok":
        assert r.status_code == (200 if have_model else 404), (path, body[:200], r.status_code, r.text)
        return
    assert r.status_code == status, (path, body[:200] if body else None, r.status_code, r.text)
    err = r.json()["error"]
    if path.startswith("/api/"):
        assert isinstance(err, str), r.text
        msg = err
    else:
        assert set(err) == {"message", "type", "param", "code"}, r.text
        msg = err["message"] + " " + str(err["param"])
    assert mention in msg, (path, body[:200] if body else None, r.text)


def test_table_has_at_least_forty_rows():
    assert len(BAD) >= 40


def run_table(server, have_model):
    with server.client() as c:
        for row in BAD:
            check_bad(c, *row, have_model)


def test_malformed_requests_get_their_status_and_the_server_keeps_serving(sock_path):
    with Server("--max-body", "1m", socket_path=sock_path) as s:
        run_table(s, False)
        rss0 = s.rss_kb()
        for _ in range(3):
            run_table(s, False)
        rss1 = s.rss_kb()
        assert rss1 - rss0 < 8 * 1024, (rss0, rss1)
        with s.client() as c:
            assert c.get("/health").status_code == 200
            assert c.get("/v1/models").json()["object"] == "list"


def test_slow_client_gets_408_or_is_closed_after_the_read_deadline(sock_path):
    with Server("--read-timeout", "2", socket_path=sock_path) as s:
        body = chat(max_tokens=1)
        t0 = time.time()
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock_path)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        got = b""
        c.settimeout(1)
        # A slow-loris: one byte every 0.5 s, never finishing within the deadline.
        for i in range(40):
            try:
                c.sendall(body[i:i + 1])
            except OSError:
                break
            try:
                chunk = c.recv(4096)
                if not chunk:
                    break
                got += chunk
                if b"\r\n\r\n" in got:
                    break
            except socket.timeout:
                pass
            if time.time() - t0 > 10:
                break
            time.sleep(0.5)
        c.close()
        assert time.time() - t0 < 9, "the slow client was not cut off"
        assert got.startswith(b"HTTP/1.1 408"), got
        assert b'"code":"request_timeout"' in got
        # A client that sends its headers and then nothing gets the same 408.
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock_path)
        c.sendall(b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        c.settimeout(6)
        t0 = time.time()
        got = c.recv(1000)
        assert got.startswith(b"HTTP/1.1 408") and b'{"error":"' in got, got
        assert time.time() - t0 < 5
        c.close()
        # A connection that never sends a request is closed by the same deadline.
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock_path)
        c.settimeout(6)
        t0 = time.time()
        assert c.recv(100) == b""
        assert time.time() - t0 < 5
        c.close()
        with s.client() as cl:
            assert cl.get("/health").status_code == 200


def test_help_documents_every_flag():
    r = subprocess.run([saragossa_bin(), "serve", "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0
    for flag in ("--model", "--ctx", "--socket", "--port", "--host", "--ollama-port", "--api-key", "--max-tokens-cap",
                 "--max-body", "--queue", "--read-timeout", "--max-connections", "--quiet"):
        assert flag in r.stdout, flag


def test_chunked_body_over_the_limit_gets_413(sock_path):
    with Server("--max-body", "2k", socket_path=sock_path) as s:
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock_path)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(8):
                c.sendall(b"400\r\n" + b"a" * 1024 + b"\r\n")
                time.sleep(0.05)
        except OSError:
            pass  # the server hangs up after answering
        c.settimeout(5)
        got = c.recv(1000)
        c.close()
        assert got.startswith(b"HTTP/1.1 413") and b"request_too_large" in got, got
        with s.client() as cl:
            assert cl.get("/health").status_code == 200
