"""POST /v1/audio/speech through the official openai client: every response_format decoded back
(libsndfile through ctypes) with its rate, length and loudness; the streamed response arriving in
chunks before the synthesis ends; the SSE events; voices; speed; the whole-file mode; errors;
a client that leaves mid-stream stopping the synthesis.

The voice is the synthetic tone voice (tests/fixtures/tts/*.tone.json: each letter a 60 ms tone,
each space a 40 ms pause, 22050 Hz), so the lengths are known exactly and no weights are needed;
the round trip through /v1/audio/transcriptions with a real Piper voice and Whisper is at the end
(skipped where either is missing)."""
import base64
import json
import time
import wave
import io

import httpx
import numpy as np
import openai
import pytest

import stt_audio
from agent_util import make_qwen3_agent_model
from server_util import ROOT, Server
from sndfile_util import decode, pcm16

TONE = ROOT / "tests" / "fixtures" / "tts" / "test.tone.json"
SLOW = ROOT / "tests" / "fixtures" / "tts" / "slow.tone.json"  # 30 ms to make each 100 ms chunk
TEXT = "Hello there. How are you?"
RATE = 22050
# the tone voice's samples for TEXT: 21 letters and marks of 1323 samples, 3 spaces of 882
N = 21 * 1323 + 3 * 882
MIME = {"mp3": "audio/mpeg", "opus": "audio/ogg", "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("speech")
    s = Server("--tts-model", f"tone={TONE}", "--tts-model", f"slow={SLOW}", "--model",
               f"q3={make_qwen3_agent_model(d / 'q3')}", "--ctx", "512", socket_path=str(d / "s.sock"),
               env={"SARAGOSSA_LOG": "info", "RETI_SERVE_MODEL_POOL": "3"})
    yield s
    s.stop()


def client(srv):
    return openai.OpenAI(api_key="none", base_url="http://sg/v1", max_retries=0,
                         http_client=httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), timeout=60))


def samples(data, fmt):
    if fmt == "pcm":
        return pcm16(data), 24000
    return decode(data, "." + fmt)


@pytest.mark.parametrize("fmt,rate", [("mp3", 22050), ("opus", 48000), ("flac", 22050), ("wav", 22050), ("pcm", 24000)])
def test_each_format_decodes_back_with_its_rate_length_and_loudness(srv, fmt, rate):
    r = client(srv).audio.speech.create(model="tone", voice="alloy", input=TEXT, response_format=fmt)
    assert r.response.headers["content-type"] == MIME[fmt]
    x, got = samples(r.content, fmt)
    assert got == rate
    # lossy coders pad the ends (encoder delay, whole frames); the lossless ones are exact
    slack = {"mp3": 0.12, "opus": 0.03}.get(fmt, 0.002)
    assert abs(len(x) / rate - N / RATE) <= slack, (fmt, len(x) / rate, N / RATE)
    # the voice's loudness (tones of peak 0.3), not normalised
    assert 0.26 < np.abs(x).max() < 0.34, (fmt, np.abs(x).max())


def test_the_default_format_is_mp3_and_openai_model_names_mean_the_first_voice_model(srv):
    r = client(srv).audio.speech.create(model="tts-1", voice="nova", input="Hi.")
    assert r.response.headers["content-type"] == "audio/mpeg"
    x, rate = decode(r.content, ".mp3")
    assert rate == RATE and len(x) > 3 * 1323 * 0.9


def test_streamed_audio_leaves_in_chunks_before_the_synthesis_ends(srv):
    c = client(srv)
    t0 = time.time()
    times, chunks = [], []
    with c.audio.speech.with_streaming_response.create(model="slow", voice="alloy", input=TEXT,
                                                       response_format="pcm") as r:
        assert r.headers["content-type"] == "audio/pcm"
        for b in r.iter_bytes():
            times.append(time.time() - t0)
            chunks.append(b)
    # 14 chunks of 100 ms, 30 ms each to make: the first bytes leave long before the last
    assert len(chunks) > 1, len(chunks)
    assert times[-1] - times[0] > 0.15, times
    x = pcm16(b"".join(chunks))
    assert abs(len(x) / 24000 - N / RATE) < 0.002
    # the same bytes as the whole file at once
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg") as h:
        whole = h.post("/v1/audio/speech", json={"model": "slow", "voice": "alloy", "input": TEXT,
                                                 "response_format": "pcm", "stream": False})
    assert whole.status_code == 200 and whole.content == b"".join(chunks)


def test_wav_streams_with_unknown_sizes_and_comes_whole_with_true_ones(srv):
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg") as h:
        body = {"model": "tone", "voice": "alloy", "input": TEXT, "response_format": "wav"}
        s = h.post("/v1/audio/speech", json=body)
        w = h.post("/v1/audio/speech", json={**body, "stream": False})
    assert s.headers.get("transfer-encoding") == "chunked"
    assert s.content[4:8] == b"\xff\xff\xff\xff" and s.content[40:44] == b"\xff\xff\xff\xff"
    assert int(w.headers["content-length"]) == len(w.content) == 44 + 2 * N
    with wave.open(io.BytesIO(w.content)) as f:
        assert (f.getframerate(), f.getnchannels(), f.getsampwidth(), f.getnframes()) == (RATE, 1, 2, N)
    assert s.content[44:] == w.content[44:]


def test_sse_sends_audio_deltas_then_done_with_usage(srv):
    c = client(srv)
    with c.audio.speech.with_streaming_response.create(model="slow", voice="hi", input=TEXT, response_format="wav",
                                                       stream_format="sse") as r:
        assert r.headers["content-type"] == "text/event-stream"
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert len(events) > 2
    assert all(e["type"] == "speech.audio.delta" and set(e) == {"type", "audio"} for e in events[:-1])
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    u = done["usage"]
    assert u["input_tokens"] == len(TEXT) and u["output_tokens"] > 0 and u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    x, rate = decode(audio, ".wav")
    assert rate == RATE and len(x) == N


def test_voices_the_models_own_openai_names_and_unknown_ones(srv):
    c = client(srv)

    def say(voice):
        return c.audio.speech.create(model="tone", voice=voice, input="Hi.", response_format="pcm").content
    lo, hi = say("lo"), say("hi")
    assert lo != hi
    assert say("alloy") == lo and say("cedar") == lo  # OpenAI's names: the model's default voice
    assert say({"id": "hi"}) == hi  # the custom-voice object
    with pytest.raises(openai.BadRequestError) as e:
        say("nobody")
    err = e.value.body
    assert err["param"] == "voice" and "unknown voice 'nobody'" in err["message"] and "lo, hi" in err["message"]


def test_speed_changes_the_length(srv):
    c = client(srv)
    x1 = pcm16(c.audio.speech.create(model="tone", voice="lo", input=TEXT, response_format="pcm").content)
    x2 = pcm16(c.audio.speech.create(model="tone", voice="lo", input=TEXT, response_format="pcm", speed=2.0).content)
    assert abs(len(x2) / len(x1) - 0.5) < 0.01


@pytest.mark.parametrize("fields,param,words", [
    ({"input": ""}, "input", ["'input' is empty"]),
    ({"input": "  \n "}, "input", ["'input' is empty"]),
    ({"input": "a" * 4097}, "input", ["4097 characters", "maximum is 4096"]),
    ({"response_format": "aac"}, "response_format", ["aac is not available", "AAC encoder"]),
    ({"response_format": "ogg"}, "response_format", ["mp3, opus, aac, flac, wav or pcm", "'ogg'"]),
    ({"speed": 5.0}, "speed", ["'speed' = 5 is outside [0.25, 4]"]),
    ({"speed": 0.1}, "speed", ["outside [0.25, 4]"]),
    ({"stream_format": "chunks"}, "stream_format", ["audio or sse"]),
])
def test_bad_requests_are_400_naming_the_field(srv, fields, param, words):
    body = {"model": "tone", "voice": "alloy", "input": "Hi.", **fields}
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg") as h:
        r = h.post("/v1/audio/speech", json=body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param and e["type"] == "invalid_request_error"
    for w in words:
        assert w in e["message"], e["message"]


def test_a_4096_character_input_is_spoken(srv):
    r = client(srv).audio.speech.create(model="tone", voice="alloy", input=("ab. " * 1024), response_format="pcm")
    assert len(r.content) > 0


def test_unknown_model_404_and_models_of_other_kinds_400(srv):
    c = client(srv)
    with pytest.raises(openai.NotFoundError) as e:
        c.audio.speech.create(model="nope", voice="alloy", input="Hi.")
    assert "model 'nope' not found" in e.value.body["message"] and "tone" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.speech.create(model="q3", voice="alloy", input="Hi.")
    assert e.value.body["code"] == "model_not_supported"
    assert "is a text model: /v1/audio/speech needs a text-to-speech model (--tts-model)" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="tone", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert e.value.body["code"] == "model_not_supported" and "is a text-to-speech model" in e.value.body["message"]


def test_a_client_that_leaves_mid_stream_stops_the_synthesis(srv):
    long_text = " ".join(["This sentence is spoken slowly."] * 40)  # about 25 s of work for the slow voice
    t0 = time.time()
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg", timeout=30) as h:
        with h.stream("POST", "/v1/audio/speech", json={"model": "slow", "voice": "alloy", "input": long_text,
                                                        "response_format": "pcm"}) as r:
            first = next(r.iter_bytes())
            assert first
    # the worker is free again at once: the next request does not wait for the rest of the text
    r = client(srv).audio.speech.create(model="tone", voice="alloy", input="Hi.", response_format="pcm")
    assert len(r.content) > 0
    assert time.time() - t0 < 8, time.time() - t0
    deadline = time.time() + 5
    while "speech stopped" not in srv.stderr() and time.time() < deadline:
        time.sleep(0.05)
    assert "speech stopped" in srv.stderr() and "(client gone)" in srv.stderr()


# ---- a real voice, heard back by the project's own Whisper ----

PIPER = stt_audio.CACHE / "models" / "piper-joe"


@pytest.fixture(scope="module")
def voice_loop(tmp_path_factory):
    if not (PIPER.exists() and stt_audio.TINY_EN.exists()):
        pytest.skip("the Piper voice or whisper tiny.en is not in the cache")
    d = tmp_path_factory.mktemp("loop")
    try:
        s = Server("--tts-model", f"joe={PIPER}", "--stt-model", f"tiny={stt_audio.TINY_EN}",
                   socket_path=str(d / "s.sock"))
    except RuntimeError as e:
        if "not run by this build" in str(e):
            pytest.skip("this build does not run Piper voices yet")
        raise
    yield s
    s.stop()


@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "flac"])
def test_speech_round_trips_through_transcription(voice_loop, fmt):
    c = client(voice_loop)
    said = "The quick brown fox jumps over the lazy dog. It was a sunny day."
    audio = c.audio.speech.create(model="joe", voice="alloy", input=said, response_format=fmt).content
    t = c.audio.transcriptions.create(model="tiny", file=(f"speech.{fmt}", audio))
    heard = [w.strip(".,!?").lower() for w in t.text.split()]
    want = [w.strip(".,!?").lower() for w in said.split()]
    missing = [w for w in want if w not in heard]
    assert len(missing) <= 2, (t.text, missing)


# ---- spoken chat answers (Chat Completions audio output) ----

def tone_samples(text):
    """What the tone voice makes of text spoken as one piece: 1323 samples a character, 882 a
    space (the sentence splitter trims the white space around sentences, so this is an upper
    bound for several)."""
    return sum(882 if ch in " \t\n" else 1323 for ch in text)


def test_a_chat_answer_comes_whole_with_its_audio_and_transcript(srv):
    r = client(srv).chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                                            seed=3, modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"})
    m = r.choices[0].message
    assert m.content is None and m.audio is not None
    assert m.audio.id.startswith("audio_") and m.audio.expires_at > r.created and m.audio.transcript
    x, rate = decode(base64.b64decode(m.audio.data), ".wav")
    assert rate == RATE and 0 < len(x) <= tone_samples(m.audio.transcript)
    # a plain answer of the same request is the transcript
    plain = client(srv).chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                                                seed=3)
    assert plain.choices[0].message.content == m.audio.transcript


def test_a_streamed_chat_answer_carries_transcript_and_pcm16_deltas(srv):
    stream = client(srv).chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                                                 seed=3, stream=True, modalities=["text", "audio"],
                                                 audio={"voice": "hi", "format": "pcm16"})
    transcript, data, ids, expires = "", b"", set(), []
    for ch in stream:
        d = ch.choices[0].delta
        assert not d.content, d  # the text is the audio's transcript
        if d.audio:
            a = d.audio.model_dump() if hasattr(d.audio, "model_dump") else d.audio
            ids.add(a.get("id"))
            transcript += a.get("transcript") or ""
            data += base64.b64decode(a["data"]) if a.get("data") else b""
            if a.get("expires_at"):
                expires.append(a["expires_at"])
    assert len(ids) == 1 and len(expires) == 1 and transcript
    x = pcm16(data)
    assert 0 < len(x) / 24000 <= tone_samples(transcript) / RATE + 0.01
    whole = client(srv).chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                                                seed=3, modalities=["text", "audio"], audio={"voice": "hi", "format": "pcm16"})
    assert whole.choices[0].message.audio.transcript == transcript
    # sentence by sentence or whole, the same samples (the stream may cut sentences apart: within 1 %)
    y = pcm16(base64.b64decode(whole.choices[0].message.audio.data))
    assert abs(len(y) - len(x)) <= 0.01 * len(y) + 1


@pytest.mark.parametrize("fields,param,words", [
    ({"modalities": ["text", "audio"]}, "audio", ["'audio'", "is required"]),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "aac"}}, "audio.format", ["AAC encoder"]),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "ogg"}}, "audio.format", ["pcm16", "'ogg'"]),
    ({"modalities": ["text", "audio"], "audio": {"voice": "nobody", "format": "wav"}}, "audio.voice",
     ["unknown voice 'nobody'", "lo, hi"]),
    ({"modalities": ["video"]}, "modalities", ["\"text\" and \"audio\""]),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", ["needs \"audio\" in 'modalities'"]),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}, "n": 2}, "n", ["one choice"]),
])
def test_bad_chat_audio_requests_are_400(srv, fields, param, words):
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg") as h:
        r = h.post("/v1/chat/completions", json={"model": "q3", "messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 2, **fields})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param, e
    for w in words:
        assert w in e["message"], e["message"]


def test_chat_audio_without_a_voice_model_is_400(tmp_path):
    with Server("--model", f"q3={make_qwen3_agent_model(tmp_path / 'q3')}", "--ctx", "256",
                socket_path=str(tmp_path / "s.sock")) as s:
        with pytest.raises(openai.BadRequestError) as e:
            client(s).chat.completions.create(model="q3", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                              modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"})
    assert e.value.body["code"] == "model_not_supported" and "--tts-model" in e.value.body["message"]


def test_voice_models_are_listed_and_shown_as_speech(srv):
    with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), base_url="http://sg") as h:
        ids = [m["id"] for m in h.get("/v1/models").json()["data"]]
        assert "tone" in ids and "slow" in ids
        r = h.post("/api/show", json={"model": "tone"}).json()
    assert r["capabilities"] == ["speech"] and r["model_info"]["general.architecture"] == "tone"
