"""`saragossa speak -o FILE`: the format follows the file's extension (.wav .flac .mp3 .opus/.ogg
.pcm/.raw .f32) or --format, and a file that can seek gets its true lengths (WAV sizes, FLAC's
sample count). The synthetic tone voice (tests/fixtures/tts/test.tone.json) makes known lengths:
the text below is 30429 samples at 22050 Hz."""
import subprocess
import wave

import numpy as np
import pytest

from server_util import ROOT, saragossa_bin
from sndfile_util import decode

TONE = ROOT / "tests" / "fixtures" / "tts" / "test.tone.json"
TEXT = "Hello there. How are you?"
N = 30429


def speak(*args):
    return subprocess.run([saragossa_bin(), "speak", "-m", str(TONE), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("ext,rate,exact", [("wav", 22050, True), ("flac", 22050, True), ("mp3", 22050, False),
                                            ("opus", 48000, False), ("ogg", 48000, False)])
def test_the_extension_picks_the_format(tmp_path, ext, rate, exact):
    out = tmp_path / f"a.{ext}"
    r = speak("-o", str(out), TEXT)
    assert r.returncode == 0, r.stderr
    x, got = decode(out.read_bytes(), "." + ext)
    assert got == rate
    if exact:
        assert len(x) == N
    else:
        assert abs(len(x) / rate - N / 22050) < 0.12
    assert 0.26 < np.abs(x).max() < 0.34


def test_wav_and_flac_files_get_their_true_lengths(tmp_path):
    assert speak("-o", str(tmp_path / "a.wav"), TEXT).returncode == 0
    with wave.open(str(tmp_path / "a.wav")) as w:
        assert w.getnframes() == N and w.getframerate() == 22050
    assert speak("-o", str(tmp_path / "a.flac"), TEXT).returncode == 0
    b = (tmp_path / "a.flac").read_bytes()
    total = (b[21] & 15) << 32 | b[22] << 24 | b[23] << 16 | b[24] << 8 | b[25]
    assert total == N


def test_raw_pcm_and_f32_keep_the_models_rate(tmp_path):
    assert speak("-o", str(tmp_path / "a.pcm"), TEXT).returncode == 0
    assert (tmp_path / "a.pcm").stat().st_size == 2 * N
    assert speak("-o", str(tmp_path / "a.bin"), "--format", "f32", TEXT).returncode == 0
    assert (tmp_path / "a.bin").stat().st_size == 4 * N


def test_a_format_there_is_not_is_a_usage_error(tmp_path):
    r = speak("-o", str(tmp_path / "a.aac"), "--format", "aac", TEXT)
    assert r.returncode == 2 and "--format must be wav, flac" in r.stderr and "'aac'" in r.stderr
