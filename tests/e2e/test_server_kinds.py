"""One server with a model of each kind: a text LLM ("q3", with n-gram speculative decoding), a
Whisper model ("tiny": tiny.en, skipped when the cache lacks it) and an embedding model ("emb").

Each route takes its own kind and refuses the other two with a 400 model_not_supported that says
what the named model is. /api/show describes every kind, and the one pool lists all three.
"""
import io
import wave

import httpx
import pytest

import stt_audio
from agent_util import make_qwen3_agent_model
from server_util import KEY, Server, free_port, make_embed_model

pytestmark = pytest.mark.skipif(not stt_audio.TINY_EN.exists(), reason="whisper tiny.en is not in the cache")


def silent_wav(seconds=1):
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * (16000 * seconds))
    return b.getvalue()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    s = Server("--model", f"q3={make_qwen3_agent_model(d / 'q3')}", "--stt-model", f"tiny={stt_audio.TINY_EN}",
               "--embed-model", f"emb={make_embed_model(d / 'emb')}", "--spec", "ngram", "--ctx", "1024",
               port=free_port(), key=KEY, env={"SARAGOSSA_LOG": "warn"})
    yield s
    s.stop()


def chat(c, model):
    return c.post("/v1/chat/completions", json={"model": model, "max_tokens": 4,
                                                "messages": [{"role": "user", "content": "hi"}]})


def embed(c, model):
    return c.post("/v1/embeddings", json={"model": model, "input": ["a man is eating"]})


def rerank(c, model):
    return c.post("/v1/rerank", json={"model": model, "query": "food", "documents": ["a man is eating"]})


def ollama_embed(c, model):
    return c.post("/api/embed", json={"model": model, "input": "a man is eating"})


def transcribe(c, model, route="transcriptions"):
    return c.post(f"/v1/audio/{route}", files={"file": ("a.wav", silent_wav())}, data={"model": model})


def refused(r, *words):
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    if isinstance(e, str):  # Ollama's error shape: the message alone
        e = {"code": "model_not_supported", "message": e}
    assert e["code"] == "model_not_supported", e
    for w in words:
        assert w in e["message"], e["message"]
    return e["message"]


def test_each_route_takes_its_own_kind(srv):
    with srv.client() as c:
        r = chat(c, "q3")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] is not None
        r = embed(c, "emb")
        assert r.status_code == 200, r.text
        assert len(r.json()["data"][0]["embedding"]) > 0
        r = ollama_embed(c, "emb")
        assert r.status_code == 200 and len(r.json()["embeddings"]) == 1, r.text
        r = transcribe(c, "tiny")
        assert r.status_code == 200, r.text
        assert "text" in r.json()
        # OpenAI's "whisper-1" means the first speech-to-text model
        assert c.post("/v1/audio/transcriptions", files={"file": ("a.wav", silent_wav())},
                      data={"model": "whisper-1"}).status_code == 200


def test_text_routes_refuse_stt_and_embed_models(srv):
    with srv.client() as c:
        refused(chat(c, "tiny"), "'tiny' is a speech-to-text model", "/v1/audio/transcriptions")
        refused(chat(c, "emb"), "'emb' is an embedding model", "cannot generate text")
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
        refused(r, "speech-to-text")
        r = c.post("/api/chat", json={"model": "emb", "messages": [{"role": "user", "content": "hi"}], "stream": False})
        refused(r, "embedding model")


def test_audio_routes_refuse_text_and_embed_models(srv):
    with srv.client() as c:
        for route in ("transcriptions", "translations"):
            refused(transcribe(c, "q3", route), "'q3' is a text model", "--stt-model")
            refused(transcribe(c, "emb", route), "'emb' is an embedding model", "--stt-model")


def test_embedding_routes_refuse_text_and_stt_models(srv):
    with srv.client() as c:
        for call in (embed, rerank, ollama_embed):
            refused(call(c, "q3"), "'q3' generates text and has no embedding head", "--embed-model")
            refused(call(c, "tiny"), "'tiny' is a speech-to-text model", "--embed-model")


def test_listings_and_show_cover_every_kind(srv):
    with srv.client() as c:
        names = {m["id"] for m in c.get("/v1/models").json()["data"]}
        assert {"q3", "tiny", "emb"} <= names
        caps = {n: c.post("/api/show", json={"model": n}).json()["capabilities"] for n in ("q3", "tiny", "emb")}
        # the Qwen3 agent model's template takes tools and it reasons
        assert caps == {"q3": ["completion", "tools", "thinking"], "tiny": ["transcription"], "emb": ["embedding"]}
    assert srv.proc.poll() is None


def test_ngram_speculation_still_serves_the_text_model(srv):
    with srv.client() as c:
        r = c.post("/v1/completions", json={"model": "q3", "prompt": "a b c a b c a b", "max_tokens": 8,
                                            "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
