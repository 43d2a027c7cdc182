"""Whisper's three sources on the random-weight fixture, no real weights needed.

tools/whisper_convert.py rewrites tests/fixtures/whisper (a Hugging Face folder) as a CTranslate2
float32 folder and back as a Hugging Face folder; the unit binary's
whisper::converted_fixture_folders_match_transformers loads both and holds them to transformers'
numbers. `saragossa inspect` shows each source (HF, CTranslate2 int8, ggml) as a Whisper model."""
import os
import subprocess

import pytest

from conftest import ROOT

FIX = ROOT / "tests" / "fixtures"
PY = str(ROOT / ".venv" / "bin" / "python")


def unit_binary():
    path = os.environ.get("SARAGOSSA_UNIT_BIN") or str(ROOT / "build" / "test_unit")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (make build/test_unit)")
    return path


def fields(out):
    f = {}
    for line in out.splitlines():
        if ": " in line:
            k, v = line.split(": ", 1)
            f.setdefault(k, v)
    return f


def test_converted_ct2_and_hf_folders_match_transformers(tmp_path):
    ct2, hf = tmp_path / "ct2", tmp_path / "hf"
    subprocess.run([PY, str(ROOT / "tools" / "whisper_convert.py"), "ct2", str(FIX / "whisper"), str(ct2)], check=True,
                   capture_output=True, timeout=300)
    subprocess.run([PY, str(ROOT / "tools" / "whisper_convert.py"), "hf", str(ct2), str(hf)], check=True,
                   capture_output=True, timeout=300)
    env = dict(os.environ, SG_WHISPER_FIXTURE_CT2=str(ct2), SG_WHISPER_FIXTURE_HF=str(hf))
    r = subprocess.run([unit_binary(), "--filter", "whisper/converted_fixture_folders_match_transformers", "--verbose"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Passing: 1" in out and out.count("logits max |d|") == 2, out[-3000:]


@pytest.mark.parametrize("path,source,dtype", [
    ("whisper", "hf", "BF16"),
    ("whisper_ct2_int8", "ct2", "I8"),
    ("whisper_ggml/ggml-model.bin", "ggml", "F16"),
])
def test_inspect_shows_each_source_as_a_whisper_model(sg, path, source, dtype):
    r = sg("inspect", str(FIX / path))
    assert r.returncode == 0, r.stderr
    f = fields(r.stdout)
    assert f["model"] == f"whisper (English-only, {source})"
    assert f["whisper_source"] == source and f["whisper_dtype"] == dtype
    assert f["whisper_encoder"] == "2 layers, 4 heads, d_model 64, ffn 128, 80 mels, 16 positions"
    assert f["whisper_decoder"] == "2 layers, 4 heads, vocab 320, 64 positions"


def test_inspect_refuses_a_truncated_ggml_file(sg, tmp_path):
    b = (FIX / "whisper_ggml" / "ggml-model.bin").read_bytes()
    p = tmp_path / "cut.bin"
    p.write_bytes(b[: len(b) - 100])
    r = sg("inspect", str(p))
    assert r.returncode == 1
    assert "runs past the file size" in r.stderr and "tensor '" in r.stderr, r.stderr
