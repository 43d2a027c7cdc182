"""Voice cloning with a Qwen3-TTS Base model (tests/fixtures/qwen3_tts/base: random weights at
small shapes, made with the qwen-tts package by tools/make_qwen_tts_fixtures.py --kind base):
`saragossa speak --ref-audio` greedy against the package's codes decoded on the engine's chunks,
in-context and x-vector only; other rates and formats of the clip; usage errors; and
POST /v1/audio/speech with ref_audio as base64 through the official openai client, its bad
inputs answered 400."""
import base64
import json
import subprocess
import wave

import httpx
import numpy as np
import openai
import pytest

from server_util import ROOT, Server, saragossa_bin
from sndfile_util import decode

BASE = ROOT / "tests" / "fixtures" / "qwen3_tts" / "base"
CUSTOM = ROOT / "tests" / "fixtures" / "qwen3_tts" / "tiny"
REF = json.loads((BASE / "ref.json").read_text())
SPEAK = REF["speak"]
CLIP = BASE / "ref.wav"


def speak(*args, model=BASE):
    return subprocess.run([saragossa_bin(), "speak", "-m", str(model), "--threads", "1", "--quiet", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("mode", ["icl", "x_vector"])
def test_speak_clones_greedy_as_the_package(tmp_path, mode):
    out = tmp_path / "out.f32"
    extra = ["--ref-text", SPEAK["ref_text"]] if mode == "icl" else ["--x-vector-only"]
    r = speak("--ref-audio", str(CLIP), *extra, "--temperature", "0", "-o", str(out), SPEAK["text"])
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype="<f4")
    want = np.array(SPEAK[mode + "_wav_chunks"], dtype=np.float32)
    assert len(SPEAK[mode + "_codes"]) * 160 == len(want)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-7


def test_a_clip_at_another_rate_is_resampled(tmp_path):
    x = np.frombuffer(wave.open(str(CLIP)).readframes(7200), dtype="<i2")
    lo = tmp_path / "ref16k.wav"
    with wave.open(str(lo), "wb") as w:  # every third sample of two: 16 kHz, enough for the test
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(x[np.arange(0, 7200, 1.5).astype(int)].tobytes())
    out = tmp_path / "out.wav"
    r = speak("--ref-audio", str(lo), "--x-vector-only", "--temperature", "0", "-o", str(out), "Hi there.")
    assert r.returncode == 0, r.stderr
    y, rate = decode(out.read_bytes(), ".wav")
    assert rate == 24000 and len(y) > 0 and len(y) % 160 == 0


@pytest.mark.parametrize("args,code,words", [
    (["--ref-text", "Hi."], 2, "--ref-audio FILE, which is missing"),
    (["--x-vector-only"], 2, "--ref-audio FILE, which is missing"),
    (["--ref-audio", str(CLIP)], 2, "--ref-text"),
    (["--ref-audio", "/nonexistent.wav", "--x-vector-only"], 1, "cannot open --ref-audio"),
    (["--ref-audio", str(ROOT / "Makefile"), "--x-vector-only"], 1, "not audio"),
    (["--temperature", "3"], 2, "--temperature must be in [0, 2]"),
])
def test_bad_clone_arguments(tmp_path, args, code, words):
    r = speak(*args, "-o", str(tmp_path / "o.wav"), "Hello.")
    assert r.returncode == code and words in r.stderr, (r.returncode, r.stderr)


def test_a_model_without_a_speaker_encoder_refuses(tmp_path):
    r = speak("--ref-audio", str(CLIP), "--x-vector-only", "-o", str(tmp_path / "o.wav"), "Hello.", model=CUSTOM)
    assert r.returncode == 1 and "needs a Base model" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("clone")
    s = Server("--tts-model", f"clone={BASE}", "--tts-model", f"custom={CUSTOM}", socket_path=str(d / "s.sock"),
               env={"SARAGOSSA_LOG": "error", "RETI_SERVE_MODEL_POOL": "2"})
    yield s
    s.stop()


def client(srv):
    return openai.OpenAI(api_key="none", base_url="http://sg/v1", max_retries=0,
                         http_client=httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), timeout=120))


B64 = base64.b64encode(CLIP.read_bytes()).decode()


@pytest.mark.parametrize("extra", [{"ref_audio": B64, "ref_text": SPEAK["ref_text"]},
                                   {"ref_audio": B64, "x_vector_only": True},
                                   {"ref_audio": "data:audio/wav;base64," + B64, "x_vector_only": True}])
def test_the_server_clones_from_base64(srv, extra):
    r = client(srv).audio.speech.create(model="clone", voice="alloy", input=SPEAK["text"], response_format="wav",
                                        extra_body=extra)
    y, rate = decode(r.content, ".wav")
    assert rate == 24000 and len(y) > 0 and len(y) % 160 == 0


@pytest.mark.parametrize("model,extra,words", [
    ("clone", {"ref_audio": base64.b64encode(b"this is no audio file").decode(), "x_vector_only": True}, "not audio"),
    ("clone", {"ref_audio": "!!!!", "x_vector_only": True}, "'ref_audio' is not valid base64 (at character 0)"),
    ("custom", {"ref_audio": B64, "x_vector_only": True}, "needs a Base model"),
])
def test_the_server_answers_bad_clones_400(srv, model, extra, words):
    with pytest.raises(openai.BadRequestError) as e:
        client(srv).audio.speech.create(model=model, voice="alloy", input="Hello.", response_format="wav", extra_body=extra)
    assert words in str(e.value), str(e.value)
    # and the server goes on
    r = client(srv).audio.speech.create(model="clone", voice="alloy", input="Hi.", response_format="wav",
                                        extra_body={"ref_audio": B64, "x_vector_only": True})
    assert len(r.content) > 44
