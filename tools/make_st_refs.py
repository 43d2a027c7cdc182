#!/usr/bin/env python3
"""Reference sentence embeddings of real models, made with sentence-transformers (torch, CPU, float32).

    tools/make_st_refs.py [--out tests/fixtures/st_refs] [NAME...]

For each model (fetched into saragossa's cache by tools/fetch_models.py) it encodes the SENTENCES below
(several scripts, one long paragraph) with SentenceTransformer(folder).encode and writes:

    <out>/<model>.json          {"model", "texts", "dim", "versions"}
    <out>/<model>.safetensors   "embeddings" float32 [len(texts), dim] (normalised as the model's modules say)

The tests read these files and need neither torch nor sentence-transformers.

It also writes the decoder-embedder reference of the tiny random Qwen3 fixture (tests/fixtures/qwen3), as
Qwen3-Embedding's modules compute it (last-token pooling of the model's final-normed hidden state, then
L2 normalisation), with transformers in float32 on seeded random ids of several lengths:

    <out>/qwen3-last-token.safetensors   "ids_<k>" int32 [n_k]; "embedding_<k>" float32 [hidden]

and all-MiniLM-L6-v2 given named prompts (config_sentence_transformers.json, default "query") and
include_prompt true or false in its Pooling config, encoded with the default prompt, a named one and none:

    <out>/minilm-prompts.safetensors     "<inc|exc>_<default|passage|long|none>" float32 [3, 384]

and the same model with two random Dense modules after its pooling (their folders and modules.json in
tests/fixtures/st_dense):

    <out>/minilm-dense.safetensors       "embeddings" float32 [3, 32]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "The new movie is awesome!",
    "How do I reset my password?",
    "Unaffordable housing: 12,000 applicants; naïve café owners protest.",
    "Paris is the capital of France, isn't it?",
    "The quick brown fox jumps over the lazy dog 3 times in 2.5 seconds.",
    "def embed(texts): return [model(t) for t in texts]  # Python",
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "E = mc^2 and a^2 + b^2 = c^2.",
    "It's 9:30am on 2024-03-15; the meeting's in room B-204.",
    "Le chat dort sur le canapé depuis ce matin.",
    "Où est la gare, s'il vous plaît ?",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Straßenbahnhaltestellenüberdachung ist ein langes Wort.",
    "El niño comió una manzana en el jardín.",
    "¿Dónde está la biblioteca?",
    "A menina está lendo um livro na praia.",
    "Il gatto è sul tavolo della cucina.",
    "De kat zit op de mat.",
    "Kot siedzi na płocie i patrzy na ptaki.",
    "Кошка спит на диване.",
    "Москва — столица России.",
    "Η γάτα κοιμάται στον καναπέ.",
    "東京は日本の首都です。",
    "我喜欢在周末去公园散步。",
    "北京是中国的首都。",
    "서울은 한국의 수도입니다.",
    "القطة نائمة على الأريكة.",
    "החתול ישן על הספה.",
    "बिल्ली सोफे पर सो रही है।",
    "แมวนอนอยู่บนโซฟา",
    "Mèo đang ngủ trên ghế sofa.",
    "Kedi kanepede uyuyor.",
    "Paka amelala kwenye sofa.",
    "I love pizza 🍕 and sushi 🍣!",
    "👍👍👍 great job team 🎉",
    "ＦＵＬＬＷＩＤＴＨ letters and ｶﾀｶﾅ",
    "ﬁne ﬂowers — ligatures, em dashes … and “quotes”.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\ninside",
    "ALL CAPS SENTENCE ABOUT THE WEATHER",
    "a",
    "?",
    "1234567890",
    "The stock market fell 3% on Tuesday after the announcement.",
    "Photosynthesis converts light energy into chemical energy.",
    "The mitochondria is the powerhouse of the cell.",
    "Please bring an umbrella; it might rain later.",
    "She sells sea shells by the sea shore.",
    ("Long paragraph. " + " ".join(
        f"Sentence {i} talks about the history of a small town, its river, its bridges and the people who "
        f"crossed them every morning on the way to work." for i in range(12))),
]


def cache_dir():
    return Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
                Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")


def fetch(name):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fetch_models.py"), name], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    return Path(r.stdout.split(maxsplit=1)[1].strip())


MODELS = {"all-mpnet-base-v2": "mpnet"}


def qwen3_last_token(out):
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import save_file

    folder = ROOT / "tests" / "fixtures" / "qwen3"
    model = transformers.AutoModel.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    rng = np.random.default_rng(40)
    ref = {}
    for k, n in enumerate((1, 7, 33, 200)):
        ids = rng.integers(3, vocab, n).astype(np.int32)
        with torch.no_grad():
            h = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).last_hidden_state[0, -1].float()
        e = torch.nn.functional.normalize(h, dim=0).numpy()
        ref[f"ids_{k}"] = ids
        ref[f"embedding_{k}"] = np.ascontiguousarray(e, dtype=np.float32)
    save_file(ref, str(out / "qwen3-last-token.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                        "generator": "tools/make_st_refs.py", "model": "tests/fixtures/qwen3"})
    print("qwen3-last-token: 4 inputs")


PROMPT_TEXTS = ["A man is eating food.", "How do I reset my password?", "Der schnelle braune Fuchs springt über den faulen Hund."]
PROMPTS = {"query": "query: ", "passage": "passage: ",
           "long": "Represent this sentence for searching relevant passages: "}


def prompt_folder(src, dst, include_prompt):
    """all-MiniLM-L6-v2 with named prompts (default "query"), and include_prompt as given: the folder the
    prompt test builds the same way from the cached model."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in ("1_Pooling", "config_sentence_transformers.json"):
            (dst / f.name).symlink_to(f)
    (dst / "1_Pooling").mkdir(exist_ok=True)
    pool = json.loads((src / "1_Pooling" / "config.json").read_text())
    pool["include_prompt"] = include_prompt
    (dst / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    (dst / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": PROMPTS, "default_prompt_name": "query"}))


def minilm_prompts(out):
    """sentence-transformers' prompts on all-MiniLM-L6-v2: the default prompt, a named one, none, and a
    prompt left out of the mean (include_prompt false)."""
    import tempfile
    import numpy as np
    import sentence_transformers
    from safetensors.numpy import save_file

    src = fetch("minilm")
    with tempfile.TemporaryDirectory() as tmp:
        ref = {}
        for inc in (True, False):
            folder = Path(tmp) / f"inc{int(inc)}"
            prompt_folder(src, folder, inc)
            m = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
            k = "inc" if inc else "exc"
            ref[f"{k}_default"] = m.encode(PROMPT_TEXTS, convert_to_numpy=True)
            ref[f"{k}_passage"] = m.encode(PROMPT_TEXTS, prompt_name="passage", convert_to_numpy=True)
            ref[f"{k}_long"] = m.encode(PROMPT_TEXTS, prompt_name="long", convert_to_numpy=True)
            ref[f"{k}_none"] = m.encode(PROMPT_TEXTS, prompt="", convert_to_numpy=True)
        ref = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in ref.items()}
        save_file(ref, str(out / "minilm-prompts.safetensors"),
                  metadata={"sentence-transformers": sentence_transformers.__version__,
                            "generator": "tools/make_st_refs.py", "texts": json.dumps(PROMPT_TEXTS),
                            "prompts": json.dumps(PROMPTS)})
    print("minilm-prompts:", ", ".join(sorted(ref)))


def minilm_dense(out):
    """all-MiniLM-L6-v2 with two random Dense modules after its pooling (384 -> 64 tanh, 64 -> 32 identity
    without bias) and its Normalize: the modules' folders go to tests/fixtures/st_dense, the embeddings of
    PROMPT_TEXTS to <out>/minilm-dense.safetensors."""
    import shutil
    import tempfile
    import numpy as np
    import sentence_transformers
    import torch
    from safetensors.numpy import save_file
    from sentence_transformers import models

    src = fetch("minilm")
    torch.manual_seed(41)
    base = sentence_transformers.SentenceTransformer(str(src), device="cpu")
    d1 = models.Dense(384, 64, activation_function=torch.nn.Tanh())
    d2 = models.Dense(64, 32, bias=False, activation_function=torch.nn.Identity())
    m = sentence_transformers.SentenceTransformer(modules=[base[0], base[1], d1, d2, base[2]], device="cpu")
    emb = m.encode(PROMPT_TEXTS, convert_to_numpy=True).astype(np.float32)
    fix = ROOT / "tests" / "fixtures" / "st_dense"
    with tempfile.TemporaryDirectory() as tmp:
        m.save(tmp)
        shutil.rmtree(fix, ignore_errors=True)
        fix.mkdir(parents=True)
        for sub in ("2_Dense", "3_Dense"):
            (fix / sub).mkdir()
            for f in ("config.json", "model.safetensors"):
                shutil.copy(Path(tmp) / sub / f, fix / sub / f)
        shutil.copy(Path(tmp) / "modules.json", fix / "modules.json")
    save_file({"embeddings": np.ascontiguousarray(emb)}, str(out / "minilm-dense.safetensors"),
              metadata={"sentence-transformers": sentence_transformers.__version__,
                        "generator": "tools/make_st_refs.py", "texts": json.dumps(PROMPT_TEXTS)})
    print("minilm-dense:", emb.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "st_refs"))
    ap.add_argument("names", nargs="*", default=list(MODELS), help="real models (none: only the tiny Qwen3 reference)")
    args = ap.parse_args()
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from safetensors.numpy import save_file

    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    qwen3_last_token(out)
    minilm_prompts(out)
    minilm_dense(out)
    for name in args.names:
        folder = fetch(MODELS[name])
        model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
        emb = model.encode(SENTENCES, batch_size=1, convert_to_numpy=True).astype(np.float32)
        save_file({"embeddings": np.ascontiguousarray(emb)}, str(out / f"{name}.safetensors"))
        meta = {"model": name, "dim": int(emb.shape[1]), "texts": SENTENCES,
                "versions": {"sentence-transformers": sentence_transformers.__version__,
                             "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                             "generator": "tools/make_st_refs.py"}}
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {emb.shape[0]} x {emb.shape[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
