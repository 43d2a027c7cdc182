"""`saragossa transcribe` and the OpenAI audio routes on the real Whisper tiny.en.

The reference is faster-whisper (CTranslate2) on the same weights and the same audio
(tests/fixtures/stt/faster_whisper_tiny_en.json, made by tools/make_stt_fixtures.py): every
segment's token ids and times must be identical, greedy on every clip (the 77 s one crosses three
30 s windows: seek, previous-text prompt, fallback rules), beam search (beam 5) on the short ones.
The word error rate against the LibriVox transcripts is bounded. srt/vtt output is parsed back.
The server is driven by the official openai client over TCP with a key and over the Unix socket;
every bad upload gets an OpenAI error body and leaves the server up.

Skipped when tiny.en (tools/fetch_models.py whisper-tiny.en) or the audio sdists (see
tests/e2e/stt_audio.py) are not on this machine.
"""
import json
import re
import subprocess

import httpx
import openai
import pytest

import stt_audio
from conftest import ROOT, saragossa_bin
from server_util import KEY, Server, free_port

REF = json.loads((ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en.json").read_text())["clips"]
CLIPS = stt_audio.clips() if stt_audio.TINY_EN.exists() else {}
pytestmark = pytest.mark.skipif(len(CLIPS) < 7, reason="whisper tiny.en or the pywhispercpp/pocketsphinx sdists are not here")
MODEL = str(stt_audio.TINY_EN)
SHORT = ["jfk", "sense_and_sensibility_01_austen_64kb-0880", "sense_and_sensibility_01_austen_64kb-0920"]


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("stt")
    out = {}
    for name, (wav, _) in CLIPS.items():
        (d / f"{name}.wav").write_bytes(wav)
        out[name] = d / f"{name}.wav"
    return out


def transcribe(*args, input=None, check=True):
    r = subprocess.run([saragossa_bin(), "transcribe", *args], input=input, capture_output=True, timeout=900)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    return r


def verbose(names, wavs, beam):
    """verbose_json of several files from one process (one JSON document per line)."""
    r = transcribe("-m", MODEL, "--beam", str(beam), "--format", "verbose_json", *[str(wavs[n]) for n in names])
    docs = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    assert len(docs) == len(names)
    return dict(zip(names, docs))


def same_segments(got, want, name):
    assert [s["text"] for s in got] == [s["text"] for s in want], name
    for g, w in zip(got, want):
        assert g["tokens"] == w["tokens"], (name, g["text"])
        assert abs(g["start"] - w["start"]) < 1e-6 and abs(g["end"] - w["end"]) < 1e-6, (name, g, w)
        assert abs(g["avg_logprob"] - w["avg_logprob"]) < 0.02, (name, g["avg_logprob"], w["avg_logprob"])
        assert abs(g["no_speech_prob"] - w["no_speech_prob"]) < 0.01
        assert g["temperature"] == w["temperature"]


@pytest.fixture(scope="module")
def greedy(wavs):
    return verbose(sorted(CLIPS), wavs, 1)


def test_greedy_segments_equal_faster_whispers_on_every_clip_long_form_included(greedy):
    for name, doc in greedy.items():
        same_segments(doc["segments"], REF[name]["beam1"], name)
    assert greedy["long"]["duration"] > 60
    assert max(s["seek"] for s in greedy["long"]["segments"]) > 3000, "the long clip is decoded over several windows"


def test_beam_search_segments_equal_faster_whispers(wavs):
    for name, doc in verbose(SHORT, wavs, 5).items():
        same_segments(doc["segments"], REF[name]["beam5"], name)


def test_beam_search_without_timestamps_equals_faster_whispers(wavs):
    # CTranslate2's beam search: only the first beam_size candidates can finish at a step; here
    # the winner ends a step later than greedy's text ("for you. Ask" against "for you ask")
    names = ["jfk", "sense_and_sensibility_01_austen_64kb-0870"]
    r = transcribe("-m", MODEL, "--beam", "5", "--no-timestamps", "--format", "verbose_json", *[str(wavs[n]) for n in names])
    docs = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    for name, doc in zip(names, docs):
        want = REF[name]["beam5_notimestamps"]
        assert [s["tokens"] for s in doc["segments"]] == [s["tokens"] for s in want], name
        assert [s["text"] for s in doc["segments"]] == [s["text"] for s in want], name


def test_word_error_rate_on_librivox_is_bounded(greedy):
    errs = words = 0
    for name, (_, ref) in CLIPS.items():
        if ref is None:
            continue
        n = len(stt_audio.words(ref))
        w = stt_audio.wer(ref, greedy[name]["text"])
        assert w <= 0.3, (name, w, greedy[name]["text"])
        errs += w * n
        words += n
    assert errs / words <= 0.08, errs / words
    assert stt_audio.wer(stt_audio.JFK_TEXT, greedy["jfk"]["text"]) == 0


def parse_cues(text, vtt):
    """[(start, end, text)] of an srt or vtt document, checking its numbering and layout."""
    if vtt:
        assert text.startswith("WEBVTT\n\n")
        text = text[len("WEBVTT\n\n"):]
    cues = []
    sep = "." if vtt else ","
    pat = re.compile(rf"^(\d\d):(\d\d):(\d\d){re.escape(sep)}(\d\d\d) --> (\d\d):(\d\d):(\d\d){re.escape(sep)}(\d\d\d)$")
    for i, block in enumerate(text.strip("\n").split("\n\n")):
        lines = block.split("\n")
        if not vtt:
            assert lines[0] == str(i + 1)
            lines = lines[1:]
        m = pat.match(lines[0])
        assert m, lines[0]
        v = [int(x) for x in m.groups()]
        cues.append((v[0] * 3600 + v[1] * 60 + v[2] + v[3] / 1000, v[4] * 3600 + v[5] * 60 + v[6] + v[7] / 1000,
                     "\n".join(lines[1:])))
    return cues


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_srt_and_vtt_parse_back_to_the_segments(fmt, wavs, greedy):
    out = transcribe("-m", MODEL, "--beam", "1", "--format", fmt, str(wavs["jfk"])).stdout.decode()
    cues = parse_cues(out, fmt == "vtt")
    segs = greedy["jfk"]["segments"]
    assert len(cues) == len(segs)
    for (a, b, t), s in zip(cues, segs):
        assert abs(a - s["start"]) < 1e-3 and abs(b - s["end"]) < 1e-3
        assert t == s["text"].strip()


def test_stdin_as_a_file_and_as_raw_pcm_give_the_same_text(wavs, greedy):
    wav = CLIPS["jfk"][0]
    want = greedy["jfk"]["text"] + "\n"
    assert transcribe("-m", MODEL, "--beam", "1", "-", input=wav).stdout.decode() == want
    pcm = stt_audio.pcm16(wav)
    assert transcribe("-m", MODEL, "--beam", "1", "--pcm-rate", "16000", "-", input=pcm).stdout.decode() == want


@pytest.mark.parametrize("data,why", [(b"", "empty"), (b"not audio at all, just text", "not audio"),
                                      (None, "truncated header"), (b"\x01", "odd pcm")])
def test_bad_audio_is_a_one_line_error(tmp_path, data, why):
    if data is None:
        data = CLIPS["jfk"][0][:30]
    f = tmp_path / "bad.wav"
    f.write_bytes(data)
    args = ["--pcm-rate", "16000", "-"] if why == "odd pcm" else [str(f)]
    r = transcribe("-m", MODEL, *args, input=data if why == "odd pcm" else None, check=False)
    assert r.returncode == 1, why
    err = r.stderr.decode()
    assert err.startswith("saragossa transcribe: ") and err.count("\n") == 1, err
    assert r.stdout == b""


def test_usage_errors(wavs):
    for args in (["--format", "xml", str(wavs["jfk"])], ["--beam", "0", str(wavs["jfk"])], [],
                 ["--task", "dance", str(wavs["jfk"])], ["--pcm-rate", "16000", str(wavs["jfk"])]):
        r = transcribe("-m", MODEL, *args, check=False)
        assert r.returncode == 2, args
    r = transcribe("-m", MODEL, "--task", "translate", str(wavs["jfk"]), check=False)
    assert r.returncode == 1 and b"English-only" in r.stderr
    r = transcribe("-m", MODEL, "--language", "de", str(wavs["jfk"]), check=False)
    assert r.returncode == 1 and b"English-only" in r.stderr


def test_initial_prompt_conditions_the_decoding_as_the_reference(wavs, greedy):
    prompt = json.loads((ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en.json").read_text())["prompt"]
    r = transcribe("-m", MODEL, "--beam", "1", "--prompt", prompt, "--format", "verbose_json", str(wavs["jfk"]))
    got = json.loads(r.stdout)["segments"]
    assert [s["tokens"] for s in got] == [s["tokens"] for s in REF["jfk"]["beam1_prompt"]]
    assert json.loads(r.stdout)["text"] != greedy["jfk"]["text"], "the prompt changes this clip's punctuation"


# ---- the server ----

@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    sock = str(tmp_path_factory.mktemp("sock") / "s.sock")
    s = Server("--stt-model", f"tiny={MODEL}", "--max-upload", "2m", socket_path=sock, port=free_port(), key=KEY,
               env={"SARAGOSSA_LOG": "warn"})
    yield s
    s.stop()


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0, timeout=600)


@pytest.fixture
def oai_unix(srv):
    http = httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket), timeout=600)
    return openai.OpenAI(base_url="http://sg/v1", api_key="unused", http_client=http, max_retries=0)


def jfk_ref(beam=5):
    return "".join(s["text"] for s in REF["jfk"][f"beam{beam}"]).strip()


def test_openai_client_over_tcp_with_a_key(oai):
    r = oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]))
    assert r.text == jfk_ref()
    srt = oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]), response_format="srt")
    assert [c[2] for c in parse_cues(srt, False)] == [s["text"].strip() for s in REF["jfk"]["beam5"]]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=oai.base_url, api_key="wrong", max_retries=0).audio.transcriptions.create(
            model="tiny", file=("jfk.wav", CLIPS["jfk"][0]))


def test_openai_client_over_the_unix_socket_verbose_json_and_vtt(oai_unix):
    wav = CLIPS["jfk"][0]
    v = oai_unix.audio.transcriptions.create(model="whisper-1", file=("jfk.wav", wav), response_format="verbose_json",
                                             timestamp_granularities=["segment"])
    assert v.language == "english" and abs(v.duration - 11.0) < 0.01
    assert [s.tokens for s in v.segments] == [s["tokens"] for s in REF["jfk"]["beam5"]]
    vtt = oai_unix.audio.transcriptions.create(model="tiny", file=("jfk.wav", wav), response_format="vtt")
    assert [c[0] for c in parse_cues(vtt, True)] == [s["start"] for s in REF["jfk"]["beam5"]]


def test_streaming_sends_deltas_then_done(oai):
    events = list(oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]), stream=True,
                                                  temperature=0.0))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(deltas) == len(REF["jfk"]["beam5"]) and len(done) == 1 and events[-1] is done[0]
    assert "".join(deltas) == done[0].text == jfk_ref()


def test_translation_on_an_english_only_model_is_a_400(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.audio.translations.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]))
    assert "English-only" in e.value.body["message"]


def post(srv, files=None, data=None, content=None, headers=None):
    with srv.client(timeout=600) as c:
        return c.post("/v1/audio/transcriptions", files=files, data=data, content=content, headers=headers)


def error_of(r, status):
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["message"] and body["type"]
    return body


def test_bad_uploads_get_openai_errors_and_the_server_stays_up(srv):
    wav = CLIPS["jfk"][0]
    assert error_of(post(srv, files={"file": ("a.wav", b"hello, not audio")}, data={"model": "tiny"}), 400)["param"] == "file"
    assert error_of(post(srv, files={"file": ("a.wav", wav[:30])}, data={"model": "tiny"}), 400)["param"] == "file"
    assert error_of(post(srv, files={"file": ("a.wav", b"")}, data={"model": "tiny"}), 400)["param"] == "file"
    assert error_of(post(srv, files={"model": (None, "tiny")}), 400)["param"] == "file"
    assert error_of(post(srv, files={"file": ("a.wav", wav)}, data={"model": "nope"}), 404)["code"] == "model_not_found"
    assert error_of(post(srv, files={"file": ("a.wav", wav)}), 400)["param"] == "model"
    assert error_of(post(srv, files={"file": ("a.wav", wav)}, data={"model": "tiny", "response_format": "xml"}), 400)
    assert error_of(post(srv, content=b"{}", headers={"Content-Type": "application/json"}), 415)
    body = b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nRIFF"
    assert error_of(post(srv, content=body, headers={"Content-Type": "multipart/form-data; boundary=B"}), 400)
    big = wav * 200  # 7 MB > --max-upload 2m
    assert error_of(post(srv, files={"file": ("a.wav", big)}, data={"model": "tiny"}), 413)["code"] == "request_too_large"
    with srv.client() as c:
        assert c.get("/health").status_code == 200
        r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        assert error_of(r, 400)["code"] == "model_not_supported"
    assert srv.proc.poll() is None


def silent_wav(path, seconds):
    import wave
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * (16000 * seconds))


def peak_rss_kb(args):
    import os
    p = subprocess.Popen([saragossa_bin(), "transcribe", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    p.stdout.close()
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss


def test_a_long_file_is_streamed_in_bounded_memory(tmp_path):
    """Five minutes take no more memory than thirty seconds: the file is read a window at a time (held
    whole, its 16 kHz samples alone would add 19 MB)."""
    silent_wav(tmp_path / "short.wav", 30)
    silent_wav(tmp_path / "long.wav", 300)
    short = peak_rss_kb(["-m", MODEL, "--beam", "1", str(tmp_path / "short.wav")])
    long = peak_rss_kb(["-m", MODEL, "--beam", "1", str(tmp_path / "long.wav")])
    assert long - short < 12 * 1024, (short, long)


def test_a_model_folder_without_a_tokenizer_is_a_clear_error(wavs):
    r = transcribe("-m", str(ROOT / "tests" / "fixtures" / "whisper"), str(wavs["jfk"]), check=False)
    assert r.returncode == 1 and b"no tokenizer.json" in r.stderr and r.stdout == b""


@pytest.fixture(scope="module")
def ggml_model(tmp_path_factory):
    """The same weights as whisper.cpp's ggml file (tools/whisper_convert.py ggml): no tokenizer.json
    beside it, the vocabulary embedded."""
    path = tmp_path_factory.mktemp("ggml") / "ggml-tiny.en.bin"
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "whisper_convert.py"), "ggml", MODEL,
                    str(path)], check=True, capture_output=True, timeout=600)
    return path


def test_a_ggml_file_transcribes_with_its_embedded_vocabulary(ggml_model, wavs):
    # the special tokens named by their places, merges by tiktoken's rule: every clip's greedy
    # segments (the long one too) as faster-whisper's on the CTranslate2 folder
    names = sorted(CLIPS)
    r = transcribe("-m", str(ggml_model), "--beam", "1", "--format", "verbose_json", *[str(wavs[n]) for n in names])
    docs = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    for name, doc in zip(names, docs):
        same_segments(doc["segments"], REF[name]["beam1"], name)
    # the prompt is encoded by the derived merges: the ids faster-whisper's tokenizer gives
    prompt = json.loads((ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en.json").read_text())["prompt"]
    r = transcribe("-m", str(ggml_model), "--beam", "1", "--prompt", prompt, "--format", "verbose_json", str(wavs["jfk"]))
    got = json.loads(r.stdout)["segments"]
    assert [s["tokens"] for s in got] == [s["tokens"] for s in REF["jfk"]["beam1_prompt"]]


# ---- stdin and uploads: streamed as a file is, with the file's results ----

def test_stdin_and_raw_pcm_give_the_files_verbose_json_over_several_windows(greedy, wavs):
    # the 77 s clip: its stdin spool is read twice (the log-mel floor, then the windows) as the file is
    wav = CLIPS["long"][0]
    args = ["-m", MODEL, "--beam", "1", "--format", "verbose_json"]
    assert json.loads(transcribe(*args, "-", input=wav).stdout) == greedy["long"]
    pcm = stt_audio.pcm16(wav)
    assert json.loads(transcribe(*args, "--pcm-rate", "16000", "-", input=pcm).stdout) == greedy["long"]
    json_args = ["-m", MODEL, "--beam", "1", "--format", "json"]
    assert transcribe(*json_args, "-", input=CLIPS["jfk"][0]).stdout == transcribe(*json_args, str(wavs["jfk"])).stdout


def test_raw_pcm_at_another_rate_and_channel_count_is_resampled_as_the_same_wav_file(tmp_path):
    # two different channels at 24 kHz: the raw reader and the WAV reader downmix and resample alike
    import wave
    import numpy as np
    mono = np.frombuffer(stt_audio.pcm16(CLIPS["jfk"][0]), dtype="<i2")
    pcm = np.stack([mono, (mono // 3).astype("<i2")], axis=1).astype("<i2").tobytes()
    with wave.open(str(tmp_path / "st.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(pcm)
    args = ["-m", MODEL, "--beam", "1", "--format", "verbose_json"]
    want = transcribe(*args, str(tmp_path / "st.wav")).stdout
    got = transcribe(*args, "--pcm-rate", "24000", "--pcm-channels", "2", "-", input=pcm).stdout
    assert got == want and json.loads(want)["segments"]


@pytest.mark.parametrize("data,pcm,says", [
    (b"", False, b"stdin is empty"), (b"not audio at all, just text", False, b"stdin is not audio"),
    (None, False, b"stdin is not audio"), ("header only", False, b"stdin holds no audio samples"),
    (b"", True, b"PCM audio on stdin is empty"), (b"\0\0\0", True, b"truncated")])
def test_bad_audio_on_stdin_is_a_one_line_error(data, pcm, says):
    if data is None:
        data = CLIPS["jfk"][0][:30]
    elif data == "header only":
        data = header_only_wav()
    args = ["--pcm-rate", "16000", "-"] if pcm else ["-"]
    r = transcribe("-m", MODEL, *args, input=data, check=False)
    err = r.stderr
    assert r.returncode == 1 and r.stdout == b"", err
    assert err.startswith(b"saragossa transcribe: -: ") and err.count(b"\n") == 1 and says in err, err


def header_only_wav():
    import io
    import wave
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
    return b.getvalue()


def test_stdin_that_cannot_be_spooled_is_a_clear_error(tmp_path):
    r = subprocess.run([saragossa_bin(), "transcribe", "-m", MODEL, "-"], input=CLIPS["jfk"][0], capture_output=True,
                       env={"TMPDIR": str(tmp_path / "absent"), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert r.returncode == 1 and r.stdout == b""
    assert r.stderr.startswith(b"saragossa transcribe: cannot create a temporary file in ") and r.stderr.count(b"\n") == 1


def test_stdin_whose_spool_cannot_be_written_is_a_clear_error(tmp_path):
    # a file size limit stands in for a full disk: the spool's write fails (EFBIG, as ENOSPC would)
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    r = subprocess.run([saragossa_bin(), "transcribe", "-m", MODEL, "-"], input=CLIPS["jfk"][0], capture_output=True,
                       env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}, preexec_fn=limit, timeout=300)
    assert r.returncode == 1 and r.stdout == b""
    err = r.stderr
    assert err.startswith(b"saragossa transcribe: cannot write stdin to a temporary file in ") and err.count(b"\n") == 1, err
    assert list(tmp_path.iterdir()) == [], "the spool is unlinked at once"


def test_an_upload_gives_the_files_verbose_json(srv, wavs):
    want = transcribe("-m", MODEL, "--format", "verbose_json", str(wavs["jfk"])).stdout
    r = post(srv, files={"file": ("jfk.wav", CLIPS["jfk"][0])}, data={"model": "tiny", "response_format": "verbose_json"})
    assert r.status_code == 200, r.text
    assert r.json() == json.loads(want)


def test_audio_uploads_without_a_sample_are_invalid_audio(srv):
    for data in (b"hello, not audio", CLIPS["jfk"][0][:30], header_only_wav()):
        e = error_of(post(srv, files={"file": ("a.wav", data)}, data={"model": "tiny"}), 400)
        assert e["param"] == "file" and e["code"] == "invalid_audio", e
    assert srv.proc.poll() is None


def test_the_library_transcribes_audio_in_memory_as_the_file(wavs):
    """sg_transcribe_memory (include/saragossa.h) on the public library: the file's verbose_json."""
    import ctypes
    import pathlib
    so = pathlib.Path(saragossa_bin()).parent / "libsaragossa.so"
    if not so.exists():
        pytest.skip(f"{so} not built")
    lib = ctypes.CDLL(str(so))
    lib.sg_last_error.restype = ctypes.c_char_p
    vp = ctypes.c_void_p
    lib.sg_stt_load.argtypes = [ctypes.c_char_p, vp, ctypes.POINTER(vp)]
    lib.sg_transcribe_memory.argtypes = [vp, ctypes.c_char_p, ctypes.c_size_t, vp, ctypes.POINTER(vp)]
    lib.sg_transcript_format.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(vp),
                                         ctypes.POINTER(ctypes.c_size_t)]
    lib.sg_transcript_free.argtypes = [vp]
    lib.sg_stt_free.argtypes = [vp]
    lib.sg_free.argtypes = [vp]
    stt, tr, out, n = vp(), vp(), vp(), ctypes.c_size_t()
    assert lib.sg_stt_load(MODEL.encode(), None, ctypes.byref(stt)) == 0, lib.sg_last_error()
    try:
        wav = CLIPS["jfk"][0]
        assert lib.sg_transcribe_memory(stt, wav, len(wav), None, ctypes.byref(tr)) == 0, lib.sg_last_error()
        assert lib.sg_transcript_format(tr, b"verbose_json", b"transcribe", ctypes.byref(out), ctypes.byref(n)) == 0
        got = ctypes.string_at(out, n.value)
        lib.sg_free(out)
        lib.sg_transcript_free(tr)
        assert json.loads(got) == json.loads(transcribe("-m", MODEL, "--format", "verbose_json", str(wavs["jfk"])).stdout)
        bad = vp()
        assert lib.sg_transcribe_memory(stt, b"not audio", 9, None, ctypes.byref(bad)) == 3  # SG_ERR_FORMAT
        assert b"not audio" in lib.sg_last_error() and not bad.value
        assert lib.sg_transcribe_memory(stt, b"", 0, None, ctypes.byref(bad)) == 3 and not bad.value
    finally:
        lib.sg_stt_free(stt)


def peak_rss_kb_stdin(args, data):
    import os
    import threading
    p = subprocess.Popen([saragossa_bin(), "transcribe", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out = []
    t = threading.Thread(target=lambda: out.append(p.stderr.read()))
    t.start()

    def feed():
        for i in range(0, len(data), 1 << 20):
            p.stdin.write(data[i:i + (1 << 20)])
        p.stdin.close()
    feed()
    p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    t.join()
    p.stdout.close()
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, out
    return usage.ru_maxrss


def test_long_audio_on_stdin_is_spooled_and_streamed_in_bounded_memory(tmp_path):
    """Five minutes on stdin take no more memory than thirty seconds from a file: stdin is spooled to
    a temporary file and streamed from it. Held whole, the WAV's bytes (9.6 MB) and its 16 kHz
    samples (19 MB) would be in memory together; the raw PCM at 48 kHz stereo, 58 MB of bytes."""
    silent_wav(tmp_path / "short.wav", 30)
    silent_wav(tmp_path / "long.wav", 300)
    args = ["-m", MODEL, "--beam", "1"]
    short = peak_rss_kb(args + [str(tmp_path / "short.wav")])
    wav = peak_rss_kb_stdin(args + ["-"], (tmp_path / "long.wav").read_bytes())
    pcm = peak_rss_kb_stdin(args + ["--pcm-rate", "48000", "--pcm-channels", "2", "-"], b"\0" * (300 * 48000 * 4))
    assert wav - short < 12 * 1024 and pcm - short < 12 * 1024, (short, wav, pcm)
