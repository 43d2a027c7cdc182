"""Embeddings and reranking served: `serve --embed-model`, driven by the official clients.

One server on the Unix socket and on TCP with a key, serving a text model ("q3"), an embedding model
("emb": the tiny random BERT fixture with a WordPiece tokenizer, see server_util.make_embed_model), the
random cross-encoder fixture ("rr") and, when the cache has it, the real all-MiniLM-L6-v2 ("minilm").

- openai's client.embeddings.create (floats and base64, token-id inputs, dimensions) over TCP and over the
  socket; the vectors equal `saragossa embed`'s (one engine) and, for token ids, transformers' mean-pooled
  reference of the fixture (max |d| / max |ref| <= 1e-3, as the CLI's test);
- ollama's Client.embed (several inputs, dimensions, truncate) and Client.embeddings;
- /v1/rerank and /rerank: sentence-transformers' CrossEncoder scores of the fixture within 1e-4, best first,
  top_n, return_documents;
- the MPNet fixture ("mp") and a decoder embedder ("qemb": the tiny Qwen3 fixture with a last-token
  pooling head): a request mixing lengths gives every input transformers' reference (and, for MPNet,
  the CLI's vector of it alone within 1e-6); /api/show of the decoder embedder names its family;
- on MiniLM: a request of 64 sentences of mixed lengths gives every sentence the vector it gets alone
  (batching invariance; tolerance 1e-6 per value, the GEMM's f32 summation order) and unit vectors.
"""
import base64
import json
import os
from pathlib import Path

import httpx
import numpy as np
import ollama
import openai
import pytest

from agent_util import make_qwen3_agent_model
from server_util import KEY, ROOT, Server, free_port, make_embed_model
from test_embed import llm_reranker
from test_fixtures import read_safetensors

CE = ROOT / "tests" / "fixtures" / "cross_encoder"
FIXTURES = ROOT / "tests" / "fixtures"
CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
MINILM = CACHE / "models" / "all-MiniLM-L6-v2"
HAVE_MINILM = (MINILM / "model.safetensors").exists()


def decoder_embedder(d):
    """The tiny Qwen3 fixture in sentence-transformers' layout: last-token pooling, normalised."""
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        (d / f).symlink_to(FIXTURES / "qwen3" / f)
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (d / "modules.json").write_text(json.dumps(mods))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "lasttoken"}))
    return d


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("embed-server")
    args = ["--model", f"q3={make_qwen3_agent_model(d / 'q3')}", "--embed-model", f"emb={make_embed_model(d / 'emb')}",
            "--embed-model", f"rr={CE}", "--embed-model", f"mp={FIXTURES / 'mpnet'}",
            "--embed-model", f"qemb={decoder_embedder(d / 'qemb')}",
            "--embed-model", f"llmrr={llm_reranker(d / 'llmrr')}"]
    if HAVE_MINILM:
        from test_embed import prompt_folder
        args += ["--embed-model", f"minilm={MINILM}",
                 "--embed-model", f"mlp={prompt_folder(MINILM, d / 'mlp', False)}"]
    s = Server(*args, "--ctx", "2048", socket_path=str(d / "s.sock"), port=free_port(), key=KEY,
               env={"RETI_SERVE_MODEL_POOL": "6"})
    s.dir = d
    yield s
    s.stop()


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def oai_unix(srv):
    http = httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket))
    return openai.OpenAI(base_url="http://sg/v1", api_key="unused", http_client=http, max_retries=0)


@pytest.fixture
def oll(srv):
    return ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})


def cli_vectors(sg, model, *texts):
    r = sg("embed", "-m", str(model), *texts)
    assert r.returncode == 0, r.stderr
    return np.array(json.loads(r.stdout), dtype=np.float32)


def test_openai_client_gets_the_cli_vectors_over_tcp_and_the_socket(srv, oai, oai_unix, sg):
    texts = ["what is the capital of france", "cats sleep", "paris is the capital city of france ."]
    want = cli_vectors(sg, srv.dir / "emb", *texts)
    for client in (oai, oai_unix):
        r = client.embeddings.create(model="emb", input=texts)
        got = np.array([d.embedding for d in r.data], dtype=np.float32)
        assert [d.index for d in r.data] == [0, 1, 2] and r.model == "emb" and r.object == "list"
        assert got.shape == (3, 32 * 2)
        np.testing.assert_array_equal(got, want)  # one engine; 9 digits read back the same f32
        assert r.usage.prompt_tokens == r.usage.total_tokens > 3 * 2


def test_openai_base64_holds_the_same_float32_bytes(oai):
    # the client asks for base64 by default and decodes it; asked for floats, the server writes JSON
    # numbers; asked for base64 explicitly, the client hands the string back as it came
    default = oai.embeddings.create(model="emb", input="cats sleep").data[0].embedding
    floats = oai.embeddings.create(model="emb", input="cats sleep", encoding_format="float").data[0].embedding
    b64 = oai.embeddings.create(model="emb", input="cats sleep", encoding_format="base64").data[0].embedding
    got = np.frombuffer(base64.b64decode(b64), dtype="<f4")
    assert got.shape == (64,)
    np.testing.assert_array_equal(got, np.array(floats, dtype=np.float32))
    np.testing.assert_array_equal(got, np.array(default, dtype=np.float32))


def test_token_id_inputs_give_the_transformers_reference(oai):
    ref, _ = read_safetensors(ROOT / "tests" / "fixtures" / "bert" / "ref.safetensors")
    ids, mask = ref["input_ids"][1], ref["attention_mask"][1]
    ids, want = ids[mask == 1].tolist(), ref["pooled"][1]
    for inp in (ids, [ids, ids[:3]]):
        r = oai.embeddings.create(model="emb", input=inp)
        got = np.array(r.data[0].embedding)
        assert np.abs(got - want).max() / np.abs(want).max() <= 1e-3
        assert r.usage.prompt_tokens == (len(ids) if inp is ids else len(ids) + 3)


def test_dimensions_keeps_the_first_values(oai):
    full = np.array(oai.embeddings.create(model="emb", input="cats sleep").data[0].embedding)
    cut = np.array(oai.embeddings.create(model="emb", input="cats sleep", dimensions=8).data[0].embedding)
    # the fixture does not normalise: the first 8 values as they are
    np.testing.assert_array_equal(cut, full[:8].astype(np.float32))


def test_ollama_client_embed_and_embeddings(oll, sg, srv):
    texts = ["cats sleep", "what is the capital of france"]
    want = cli_vectors(sg, srv.dir / "emb", *texts)
    r = oll.embed(model="emb", input=texts)
    np.testing.assert_array_equal(np.array(r.embeddings, dtype=np.float32), want)
    assert r.model == "emb" and r.prompt_eval_count > 4 and r.total_duration > 0
    one = oll.embed(model="emb", input="cats sleep", dimensions=4)
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == 4
    old = oll.embeddings(model="emb", prompt="cats sleep")
    np.testing.assert_array_equal(np.array(old.embedding, dtype=np.float32), want[0])
    long = " ".join(["a"] * 70)  # over the fixture's 64 tokens: Ollama truncates unless told not to
    assert len(oll.embed(model="emb", input=long).embeddings[0]) == 64
    with pytest.raises(ollama.ResponseError) as e:
        oll.embed(model="emb", input=long, truncate=False)
    assert e.value.status_code == 400 and "exceeds the model's limit of 64" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        oll.embed(model="q3", input="x")
    assert e.value.status_code == 400 and "has no embedding head" in str(e.value)


def test_rerank_gives_the_cross_encoder_scores_best_first(srv):
    ref = json.loads((CE / "ref.json").read_text())
    with srv.client() as c:
        for path in ("/v1/rerank", "/rerank"):
            r = c.post(path, json={"model": "rr", "query": ref["query"], "documents": ref["documents"]})
            assert r.status_code == 200, r.text
            res = r.json()["results"]
            assert len(res) == len(ref["documents"])
            scores = [x["relevance_score"] for x in res]
            assert scores == sorted(scores, reverse=True)
            for x in res:
                assert abs(x["relevance_score"] - ref["scores"][x["index"]]) <= 1e-4, x
                assert x["document"]["text"] == ref["documents"][x["index"]]
            assert r.json()["usage"]["prompt_tokens"] == sum(len(i) for i in ref["input_ids"])
        r = c.post("/v1/rerank", json={"model": "rr", "query": ref["query"], "documents": ref["documents"], "top_n": 2,
                                       "return_documents": False}).json()["results"]
        best = sorted(range(len(ref["scores"])), key=lambda i: -ref["scores"][i])[:2]
        assert [x["index"] for x in r] == best and all("document" not in x for x in r)


def test_rerank_with_an_llm_reranker(srv):
    """The Qwen3-Reranker-style fixture served: CrossEncoder.predict's scores, prompt tokens counted."""
    ref = json.loads((ROOT / "tests" / "fixtures" / "llm_reranker" / "ref.json").read_text())
    with srv.client() as c:
        r = c.post("/v1/rerank", json={"model": "llmrr", "query": ref["query"], "documents": ref["documents"]})
        assert r.status_code == 200, r.text
        for x in r.json()["results"]:
            assert abs(x["relevance_score"] - ref["scores"][x["index"]]) <= 1e-4, x
        assert r.json()["usage"]["prompt_tokens"] == sum(len(i) for i in ref["prompt_ids"])
        r = c.post("/v1/embeddings", json={"model": "llmrr", "input": "x"})
        assert r.status_code == 400 and "reranker" in r.text


def test_text_routes_refuse_the_embedding_model_and_the_server_stays_up(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="emb", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert "is an embedding model" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.embeddings.create(model="q3", input="hi")
    assert "has no embedding head" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        oai.embeddings.create(model="nope", input="hi")
    models = {m.id for m in oai.models.list().data}
    assert {"q3", "emb", "rr"} <= models


def test_ollama_show_says_embedding_and_the_weight_type(oll):
    s = oll.show("emb")
    assert "embedding" in s.capabilities and s.details.quantization_level == "BF16"
    assert s.modelinfo["context_length"] == 64 and s.modelinfo["vocab_size"] == 320
    assert "completion" in oll.show("q3").capabilities


def test_text_model_still_answers(oai):
    r = oai.chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert oai.embeddings.create(model="emb", input="hi").data


def test_many_inputs_in_one_request(oai):
    texts = [f"cats sleep {'a ' * (i % 20)}".strip() for i in range(1000)]
    r = oai.embeddings.create(model="emb", input=texts)
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    assert got.shape == (1000, 64)
    np.testing.assert_array_equal(got[20], got[0])  # the same text twice, at different places in the batch
    assert not np.array_equal(got[0], got[1])


needs_minilm = pytest.mark.skipif(not HAVE_MINILM, reason="all-MiniLM-L6-v2 not in the cache (tools/fetch_models.py minilm)")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "Ein Mann isst Essen.", "Un homme mange de la nourriture.",
             "Мужчина ест еду.", "男人在吃东西。", "A cheetah is running behind its prey on the savanna at dusk.",
             "Two men pushed carts through the woods while the rain kept falling all afternoon long."]


@needs_minilm
def test_minilm_a_sentence_in_a_batch_of_64_is_the_same_as_alone(oai):
    texts = [" ".join([SENTENCES[i % len(SENTENCES)]] * (1 + i % 5)) for i in range(64)]
    batch = np.array([d.embedding for d in oai.embeddings.create(model="minilm", input=texts).data])
    assert batch.shape == (64, 384)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    for i in (0, 1, 7, 13, 33, 63):
        alone = np.array(oai.embeddings.create(model="minilm", input=texts[i]).data[0].embedding)
        assert np.abs(batch[i] - alone).max() <= 1e-6, i


@needs_minilm
def test_prompt_name_gives_sentence_transformers_prompted_vectors(oai, oll):
    """prompt_name (the field text-embeddings-inference takes) picks one of the model's prompts; without
    it the default prompt applies, as SentenceTransformer.encode does; unknown names are a 400 listing them."""
    from test_embed import prompt_refs
    texts, ref = prompt_refs()
    got = np.array([d.embedding for d in oai.embeddings.create(model="mlp", input=texts).data])
    assert np.abs(got - ref["exc_default"]).max() < 1e-4
    got = np.array([d.embedding for d in oai.embeddings.create(model="mlp", input=texts,
                                                                extra_body={"prompt_name": "long"}).data])
    assert np.abs(got - ref["exc_long"]).max() < 1e-4
    r = httpx.post(f"http://127.0.0.1:{oai._client.base_url.port}/api/embed", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": "mlp", "input": texts, "prompt_name": "passage"}, timeout=60)
    assert r.status_code == 200, r.text
    assert np.abs(np.array(r.json()["embeddings"]) - ref["exc_passage"]).max() < 1e-4
    with pytest.raises(openai.BadRequestError) as ei:
        oai.embeddings.create(model="mlp", input="x", extra_body={"prompt_name": "nope"})
    msg = str(ei.value)
    assert "'nope'" in msg and "'query'" in msg and "'passage'" in msg
    with pytest.raises(openai.BadRequestError) as ei:
        oai.embeddings.create(model="minilm", input="x", extra_body={"prompt_name": "query"})
    assert "has none" in str(ei.value)


@needs_minilm
def test_minilm_dimensions_renormalise(oai, oll):
    v = np.array(oai.embeddings.create(model="minilm", input="A man is eating food.", dimensions=64).data[0].embedding)
    full = np.array(oai.embeddings.create(model="minilm", input="A man is eating food.").data[0].embedding)
    assert v.shape == (64,) and abs(np.linalg.norm(v) - 1.0) < 1e-5
    np.testing.assert_allclose(v, full[:64] / np.linalg.norm(full[:64]), atol=1e-6)
    o = np.array(oll.embed(model="minilm", input="A man is eating food.", dimensions=64).embeddings[0])
    np.testing.assert_allclose(o, v, atol=1e-7)


def test_mpnet_inputs_of_mixed_lengths_in_one_request(oai, sg):
    ref, _ = read_safetensors(FIXTURES / "mpnet" / "ref.safetensors")
    ids = ref["input_ids"][1][ref["attention_mask"][1] == 1].tolist()
    want = ref["pooled"][1]
    inputs = [ids[:3], ids, ids[:17], ids[:1]]
    r = oai.embeddings.create(model="mp", input=inputs, encoding_format="float")
    got = np.array([d.embedding for d in r.data], dtype=np.float64)
    assert np.abs(got[1] - want).max() / np.abs(want).max() <= 1e-3
    for i, inp in enumerate(inputs):
        alone = sg("embed", "-m", str(FIXTURES / "mpnet"), "--tokens", ",".join(map(str, inp)))
        assert alone.returncode == 0, alone.stderr
        assert np.abs(got[i] - np.array(json.loads(alone.stdout)[0])).max() <= 1e-6, f"input {i}"


def test_embeddinggemma_served_with_and_without_its_prompt(tmp_path):
    """The random EmbeddingGemma fixture (bidirectional Gemma 3, two-sided window) through the clients,
    on a server of its own (the module's holds the most models a server takes): sentence-transformers'
    vectors, plain and with the "query" prompt."""
    srv = Server("--embed-model", f"egm={FIXTURES / 'embeddinggemma'}", socket_path=str(tmp_path / "s.sock"), port=free_port(), key=KEY)
    try:
        oai = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)
        oll = ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})
        egm_checks(oai, oll)
    finally:
        srv.stop()


def egm_checks(oai, oll):
    ref = json.loads((FIXTURES / "embeddinggemma" / "ref.json").read_text())
    arrays = {k: v[1] for k, v in read_safetensors(FIXTURES / "embeddinggemma" / "ref.safetensors")[0].items()}
    texts = ref["sentences"][:5]
    r = oai.embeddings.create(model="egm", input=texts, encoding_format="float")
    got = np.array([d.embedding for d in r.data], dtype=np.float64)
    assert np.abs(got - np.asarray(arrays["batch"][:5])).max() <= 1e-6
    assert r.usage.prompt_tokens == sum(len(ids) for ids in ref["ids"][:5])
    r = oai.embeddings.create(model="egm", input=texts, encoding_format="float", extra_body={"prompt_name": ref["prompt_name"]})
    got = np.array([d.embedding for d in r.data], dtype=np.float64)
    assert np.abs(got - np.asarray(arrays["prompted"][:5])).max() <= 1e-6
    e = oll.embed(model="egm", input=texts[:2])
    assert np.abs(np.array(e.embeddings, dtype=np.float64) - np.asarray(arrays["batch"][:2])).max() <= 1e-6


def test_decoder_embedder_served_in_one_request_of_several_inputs(oai, oll):
    ref, _ = read_safetensors(FIXTURES / "st_refs" / "qwen3-last-token.safetensors")
    inputs = [ref[f"ids_{k}"][1].tolist() for k in range(4)]
    r = oai.embeddings.create(model="qemb", input=inputs, encoding_format="float")
    assert [d.index for d in r.data] == [0, 1, 2, 3]
    assert r.usage.prompt_tokens == sum(len(x) for x in inputs)
    for k, d in enumerate(r.data):
        got, want = np.array(d.embedding), ref[f"embedding_{k}"][1].astype(np.float64)
        cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cos >= 0.99999 and float(np.abs(got - want).max()) < 1e-4, f"{len(inputs[k])} tokens: cosine {cos:.7f}"
    s = oll.show("qemb")
    assert "embedding" in s.capabilities and s.details.family == "qwen3"
    assert s.modelinfo["vocab_size"] == 384
