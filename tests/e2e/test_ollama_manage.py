"""Ollama's model management against `saragossa serve`, driven by the official `ollama` client:
pull (from a local fake Hugging Face hub, as tests/e2e/test_hub.py serves one), list, show, ps,
copy, chat with what was pulled, delete; and bad input on each route, a client that leaves in the
middle of a pull, and the server alive after all of it."""
import json
import time
from pathlib import Path

import httpx
import ollama
import pytest

from server_util import KEY, Server, free_port, make_test_model
from test_hub import FakeHub, Repo

SLOW_BYTES = 2 << 20


class SlowHub(FakeHub):
    """The fake hub, with one CDN blob sent slowly (32 KiB every 20 ms)."""

    slow_sha = None
    slow_ranges = []

    def handle(self, h, head):
        path = h.path.split("?")[0]
        if head or not self.slow_sha or path != f"/cdn/{self.slow_sha}":
            return super().handle(h, head)
        data = self.blobs[self.slow_sha]
        rng = h.headers.get("Range")
        self.slow_ranges.append(rng)
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        h.send_response(206 if rng else 200)
        if rng:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(data) - start))
        h.end_headers()
        try:
            for i in range(start, len(data), 32768):
                h.wfile.write(data[i:i + 32768])
                h.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass


def repo_files(model_dir):
    return {f: (Path(model_dir) / f).read_bytes() for f in
            ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("manage")
    local = make_test_model("llama", tmp / "local", 320)
    hub = SlowHub()
    hub.add("org/tiny-chat", Repo(repo_files(local), lfs={"model.safetensors", "tokenizer.json"}))
    slow = repo_files(local)
    slow["extra.safetensors"] = b"\0" * SLOW_BYTES  # a second shard the loader never needs
    hub.add("org/slow", Repo(slow, lfs={"model.safetensors", "tokenizer.json", "extra.safetensors"}))
    hub.slow_sha = Repo(slow).sha256("extra.safetensors")
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp / "hub"), "HF_HOME": str(tmp / "hf-home"), "HF_TOKEN": "",
           "HF_HUB_OFFLINE": "0", "SARAGOSSA_CACHE_DIR": str(tmp / "sg"), "SARAGOSSA_HUB_RETRIES": "1",
           "SARAGOSSA_LOG": "info"}
    srv = Server("--model", f"local={local}", "--max-body", "65536", port=free_port(), key=KEY, env=env)
    yield srv, hub, tmp
    srv.stop()
    hub.close()


@pytest.fixture
def ol(setup):
    return ollama.Client(host=f"http://127.0.0.1:{setup[0].port}", headers={"Authorization": f"Bearer {KEY}"})


def names(ol):
    return [m.model for m in ol.list().models]


def test_pull_streams_progress_and_the_model_is_served(setup, ol):
    srv, hub, tmp = setup
    lines = list(ol.pull("org/tiny-chat", stream=True))
    st = [p.status for p in lines]
    assert st[0] == "pulling manifest" and st[-1] == "success"
    dl = [p for p in lines if p.status.startswith("downloading ")]
    files = {p.status.split(" ", 1)[1] for p in dl}
    assert files == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    for f in files:
        last = [p for p in dl if p.status == f"downloading {f}"][-1]
        assert last.total > 0 and last.completed == last.total
    weights = [p for p in dl if p.status == "downloading model.safetensors"][-1]
    assert weights.digest.startswith("sha256:") and len(weights.digest) == 7 + 64
    assert "verifying sha256 digest" in st
    assert "org/tiny-chat" in names(ol)
    r = ol.chat(model="org/tiny-chat", messages=[{"role": "user", "content": "Hello"}], options={"num_predict": 4})
    assert r.done and r.eval_count == 4
    # pulled again: nothing to fetch, one object when not streamed
    hub.clear()
    one = ol.pull("org/tiny-chat")
    assert one.status == "success"
    assert hub.requests("cdn") == []


def test_list_show_and_ps_describe_the_model(setup, ol):
    ol.pull("org/tiny-chat")
    listed = {m.model: m for m in ol.list().models}
    m = listed["org/tiny-chat"]
    assert m.size > 1000 and m.details.format == "safetensors" and m.digest and m.modified_at
    s = ol.show("org/tiny-chat")
    assert s.details.family == "llama" and s.details.format == "safetensors"
    assert s.details.parameter_size and s.details.quantization_level
    assert "<|im_start|>" in s.template
    assert "stop" in s.parameters and "num_ctx" in s.parameters
    assert s.modelinfo["general.architecture"] == "llama" and s.modelinfo["general.parameter_count"] > 0
    assert "completion" in s.capabilities
    ps = {p.model: p for p in ol.ps().models}
    assert ps["org/tiny-chat"].size > 1000 and ps["org/tiny-chat"].expires_at and ps["org/tiny-chat"].context_length > 0


def test_copy_then_delete_removes_files_with_the_last_name(setup, ol):
    srv, hub, tmp = setup
    ol.pull("org/tiny-chat")
    assert ol.copy("org/tiny-chat", "tiny-copy").status == "success"
    assert "tiny-copy" in names(ol)
    r = ol.generate(model="tiny-copy", prompt="Hello", options={"num_predict": 3})
    assert r.done and r.eval_count == 3
    repo = tmp / "hub" / "models--org--tiny-chat"
    assert ol.delete("org/tiny-chat").status == "success"
    assert "org/tiny-chat" not in names(ol) and repo.exists()  # the copy still uses the files
    assert ol.delete("tiny-copy").status == "success"
    assert "tiny-copy" not in names(ol) and not repo.exists()
    with pytest.raises(ollama.ResponseError) as e:
        ol.chat(model="tiny-copy", messages=[{"role": "user", "content": "Hi"}])
    assert e.value.status_code == 404
    # a model given on the command line is forgotten, its files stay
    assert ol.delete("local").status == "success" and "local" not in names(ol)


def raw(srv, method, path, **kw):
    with srv.client() as c:
        return c.request(method, path, **kw)


@pytest.mark.parametrize("method,path", [("POST", "/api/pull"), ("DELETE", "/api/delete"), ("POST", "/api/copy")])
def test_malformed_bodies_get_ollama_errors(setup, method, path):
    srv = setup[0]
    for body, status in ((b"{not json", 400), (b"[]", 400), (b'{"model": 5, "source": 5}', 400), (b"", 400),
                         (b'{"model": "x\\u0000y", "source": "x\\u0000y", "destination": "z"}', 400)):
        r = raw(srv, method, path, content=body)
        assert r.status_code == status, (body, r.text)
        assert isinstance(r.json()["error"], str)
    r = raw(srv, method, path, content=b'{"model": "' + b"a" * 70000 + b'"}')
    assert r.status_code == 413 and "error" in r.json()
    assert raw(srv, "GET", "/health").status_code == 200


def test_unknown_models_and_bad_names(setup, ol):
    with pytest.raises(ollama.ResponseError) as e:
        ol.pull("llama3.2")
    assert e.value.status_code == 400 and "Hugging Face repo" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        ol.pull("org/missing")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:  # streamed: the error is the last line
        list(ol.pull("org/missing", stream=True))
    with pytest.raises(ollama.ResponseError) as e:
        ol.pull("org/../etc")
    assert e.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as e:
        ol.show("org/never")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        ol.delete("org/never")
    assert e.value.status_code == 404
    assert raw(setup[0], "DELETE", "/api/delete", json={"model": "org/never"}).status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        ol.copy("org/never", "x")
    assert e.value.status_code == 404
    r = raw(setup[0], "POST", "/api/copy", json={"source": "org/never", "destination": "x"})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    assert raw(setup[0], "GET", "/api/pull").status_code == 405
    with pytest.raises(ollama.ResponseError):
        ol.pull("hf.co/org/missing:latest")
    assert "x" not in names(ol)


def test_client_leaving_mid_pull_stops_the_download(setup, ol):
    srv, hub, tmp = setup
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"},
                      timeout=30) as c:
        with c.stream("POST", "/api/pull", json={"model": "org/slow"}) as r:
            assert r.status_code == 200
            for ln in r.iter_lines():
                if "extra.safetensors" in ln and json.loads(ln).get("completed", 0) > 0:
                    break
    # the stream is closed mid-download: the pull stops at its next bytes, the partial file stays
    t0 = time.time()
    while "pull of org/slow stopped" not in srv.stderr() and time.time() - t0 < 10:
        time.sleep(0.1)
    assert "pull of org/slow stopped" in srv.stderr()
    blobs = tmp / "hub" / "models--org--slow" / "blobs"
    part = [p for p in blobs.iterdir() if p.name.endswith(".incomplete")]
    assert part and 0 < part[0].stat().st_size < SLOW_BYTES
    assert "org/slow" not in names(ol)
    assert raw(srv, "GET", "/health").status_code == 200
    # a later pull resumes it and ends well
    assert ol.pull("org/slow").status == "success"
    assert "org/slow" in names(ol)
    assert hub.slow_ranges[0] is None and hub.slow_ranges[-1].startswith("bytes=") and hub.slow_ranges[-1] != "bytes=0-"
