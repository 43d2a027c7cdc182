"""EmbeddingGemma: Gemma 3 with bidirectional attention as a sentence-transformers embedder.

No EmbeddingGemma weights are tested: tests/fixtures/embeddinggemma (tools/make_embeddinggemma_fixture.py)
is a tiny random folder of google/embeddinggemma-300m's layout (gemma3_text with
use_bidirectional_attention, a full layer between sliding ones, mean pooling, two Dense modules without
bias, Normalize, its prompts) with a Gemma-format tokenizer. Its sliding window (8 in the file, 5 as
transformers runs it: keys less than 5 positions away on either side) is shorter than most of the
sentences, up to 85 tokens. The reference is SentenceTransformer.encode in float32 on the CPU; each
sentence must agree to cosine >= 0.99999 and max |d| <= 1e-6 (unit vectors; measured 1.8e-7 at most),
embedded alone, all in one call, with the "query" prompt and with include_prompt false; and our
tokenizer's ids must be transformers'.
"""
import json

import numpy as np
import pytest

from conftest import ROOT
from test_fixtures import read_safetensors

FIX = ROOT / "tests" / "fixtures" / "embeddinggemma"
REF = json.loads((FIX / "ref.json").read_text())
REF.update({k: v[1] for k, v in read_safetensors(FIX / "ref.safetensors")[0].items()})
MAX_ABS = 1e-6
MIN_COS = 0.99999


def embed(sg, *args):
    r = sg("embed", "-m", str(FIX), *args)
    assert r.returncode == 0, r.stderr
    return np.array(json.loads(r.stdout), dtype=np.float64)


def check(got, want, what, max_abs=MAX_ABS):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, what
    for i in range(len(want)):
        cos = float(got[i] @ want[i] / (np.linalg.norm(got[i]) * np.linalg.norm(want[i])))
        d = float(np.abs(got[i] - want[i]).max())
        assert cos >= MIN_COS and d <= max_abs, \
            f"{what}, sentence {i} ({len(REF['ids'][i])} tokens): cosine {cos:.8f}, max |d| {d:.2e}"


def test_embeddinggemma_matches_sentence_transformers_alone_and_in_one_call(sg):
    texts = REF["sentences"]
    alone = np.concatenate([embed(sg, t) for t in texts])
    check(alone, REF["alone"], "alone")
    together = embed(sg, *texts)
    check(together, REF["batch"], "in one call")
    # an input's embedding does not depend on the others (each runs its own forward)
    assert np.array_equal(alone, together)
    assert np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-6)


def test_embeddinggemma_window_changes_the_long_sentences(sg, tmp_path):
    """The same folder with a window that covers every token: the sentences longer than the real
    window move (so the agreement above depends on the two-sided window), the shortest does not."""
    d = tmp_path / "wide"
    d.mkdir()
    for f in FIX.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f)
    cfg = json.loads((FIX / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "sliding_window": 1000}))
    texts = REF["sentences"]
    r = sg("embed", "-m", str(d), *texts)
    assert r.returncode == 0, r.stderr
    wide = np.array(json.loads(r.stdout))
    want = np.asarray(REF["batch"])
    W = REF["sliding_window_effective"]
    for i, ids in enumerate(REF["ids"]):
        d = float(np.abs(wide[i] - want[i]).max())
        if len(ids) <= W:
            assert d <= MAX_ABS, f"sentence {i} ({len(ids)} tokens) inside the window moved by {d:.2e}"
        elif len(ids) > 2 * W:
            assert d > 1e-3, f"sentence {i} ({len(ids)} tokens) did not move ({d:.2e}) without the window"


def test_embeddinggemma_tokenizer_gives_transformers_ids(sg):
    texts = REF["sentences"]
    got = embed(sg, *texts)
    for i, ids in enumerate(REF["ids"]):
        by_ids = embed(sg, "--tokens", ",".join(map(str, ids)))
        assert np.array_equal(by_ids[0], got[i]), f"{texts[i]!r}: our tokenizer's ids differ from transformers' {ids}"


def test_embeddinggemma_query_prompt_matches_sentence_transformers(sg):
    texts = REF["sentences"]
    got = embed(sg, "--prompt-name", REF["prompt_name"], *texts)
    check(got, REF["prompted"], f"prompt_name {REF['prompt_name']!r}")
    # the prompt is the model's text, put before each sentence and tokenized with it
    by_text = embed(sg, "--prompt", "task: search result | query: ", *texts)
    assert np.array_equal(got, by_text)
    by_ids = embed(sg, "--tokens", ",".join(map(str, REF["prompt_ids"][3])))
    assert np.array_equal(by_ids[0], got[3])
    # and it changes the vectors (the test could fail)
    assert np.abs(got - np.asarray(REF["batch"])).max() > 1e-2


def test_embeddinggemma_prompt_left_out_of_the_mean_matches_sentence_transformers(sg, tmp_path):
    """include_prompt false in the Pooling config: the prompt's tokens (<bos> and the prompt's own)
    still run through the layers but are left out of the mean."""
    d = tmp_path / "exclude"
    d.mkdir()
    for f in FIX.iterdir():
        if f.name != "1_Pooling":
            (d / f.name).symlink_to(f)
    (d / "1_Pooling").mkdir()
    pool = json.loads((FIX / "1_Pooling" / "config.json").read_text())
    (d / "1_Pooling" / "config.json").write_text(json.dumps({**pool, "include_prompt": False}))
    r = sg("embed", "-m", str(d), "--prompt-name", REF["prompt_name"], *REF["sentences"])
    assert r.returncode == 0, r.stderr
    check(np.array(json.loads(r.stdout)), REF["prompted_exclude"], "include_prompt false")


NO_GPU = ("no CUDA backend", "no usable GPU", "no CUDA device")


def test_embeddinggemma_on_cuda_matches_sentence_transformers(sg):
    """The two-sided window on the GPU (the CUDA attention kernels' key range on both sides of each
    query): every sentence, short ones (the small-batch kernel) and long ones (the GEMM path), and
    the prompted inputs. The GEMMs run tf32x3 (about FP32): 1e-5 allowed where the CPU has 1e-6.
    Without a GPU the backend refuses with the reason."""
    r = sg("embed", "-m", str(FIX), "--backend", "cuda", *REF["sentences"])
    if r.returncode == 1 and any(w in r.stderr for w in NO_GPU):
        pytest.skip("no GPU here: " + r.stderr.strip()[-120:])
    assert r.returncode == 0, r.stderr
    check(np.array(json.loads(r.stdout), dtype=np.float64), REF["batch"], "on CUDA", max_abs=1e-5)
    r = sg("embed", "-m", str(FIX), "--backend", "cuda", "--prompt-name", REF["prompt_name"], *REF["sentences"])
    assert r.returncode == 0, r.stderr
    check(np.array(json.loads(r.stdout), dtype=np.float64), REF["prompted"], "on CUDA with the prompt", max_abs=1e-5)


@pytest.mark.parametrize("args,why", [
    (["--tokens", "2,420"], ("token 1 = 420 is outside the vocabulary [0, 420)",)),
    (["--tokens", ",".join(["5"] * 129)], ("129 tokens exceeds the model's limit of 128",)),
])
def test_embeddinggemma_refuses_what_it_cannot_run(sg, args, why):
    r = sg("embed", "-m", str(FIX), *args)
    assert r.returncode == 1 and r.stdout == "" and any(w in r.stderr for w in why), r.stderr


def test_embeddinggemma_does_not_generate(sg):
    r = sg("generate", "--model", str(FIX), "--max-tokens", "3", "--prompt", "Hello")
    assert r.returncode == 1 and "bidirectional attention" in r.stderr and "embedding model" in r.stderr, r.stderr
