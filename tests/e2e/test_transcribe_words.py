"""Word-level timestamps (`transcribe --word-timestamps`, `timestamp_granularities[]=word`) on the
real Whisper tiny.en against faster-whisper with word_timestamps=True on the same weights and
audio (tests/fixtures/stt/faster_whisper_tiny_en_words.json, made by
tools/make_stt_word_fixtures.py).

Words move the next window's seek to the last word's end and set each segment's start and end,
so the segments are compared too: greedy on every clip (the 77 s one crosses several windows)
and beam search on three short ones. Every word's text must be identical, its start and end within
0.02 s (one alignment frame) with nearly all identical to the reference's two decimals, its
probability within 2e-3 (the decoder's float32 sums differ from CTranslate2's in the last bits).
srt/vtt keep one cue per segment. The server answers the openai client's
timestamp_granularities=["word"] with the same words.

Skipped when tiny.en (tools/fetch_models.py whisper-tiny.en) or the audio sdists (see
tests/e2e/stt_audio.py) are not on this machine.
"""
import json
import subprocess

import openai
import pytest

import stt_audio
from conftest import ROOT, saragossa_bin
from server_util import KEY, Server, free_port
from test_transcribe import parse_cues

REF = json.loads((ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en_words.json").read_text())["clips"]
CLIPS = stt_audio.clips() if stt_audio.TINY_EN.exists() else {}
pytestmark = pytest.mark.skipif(len(CLIPS) < 7, reason="whisper tiny.en or the pywhispercpp/pocketsphinx sdists are not here")
MODEL = str(stt_audio.TINY_EN)
SHORT = ["jfk", "sense_and_sensibility_01_austen_64kb-0880", "sense_and_sensibility_01_austen_64kb-0920"]


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("stt_words")
    out = {}
    for name, (wav, _) in CLIPS.items():
        (d / f"{name}.wav").write_bytes(wav)
        out[name] = d / f"{name}.wav"
    return out


def transcribe(*args):
    r = subprocess.run([saragossa_bin(), "transcribe", *args], capture_output=True, timeout=900)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def verbose(names, wavs, beam):
    out = transcribe("-m", MODEL, "--beam", str(beam), "--word-timestamps", "--format", "verbose_json",
                     *[str(wavs[n]) for n in names])
    docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(docs) == len(names)
    return dict(zip(names, docs))


def check_words(got, want, name, stats):
    """got: OpenAI-shaped words ({word, start, end[, probability]}); want: the fixture's
    [word, start, end, probability] with the leading space."""
    assert [w["word"] for w in got] == [w[0].strip() for w in want], name
    for g, w in zip(got, want):
        for a, b in ((g["start"], w[1]), (g["end"], w[2])):
            assert abs(a - b) <= 0.02 + 1e-9, (name, g, w)
            stats["times"] += 1
            stats["same"] += abs(a - b) < 1e-6
        if "probability" in g:
            assert abs(g["probability"] - w[3]) <= 2e-3, (name, g, w)
            stats["dp"] = max(stats["dp"], abs(g["probability"] - w[3]))


def check_doc(doc, ref, name, stats):
    segs = doc["segments"]
    assert [s["text"] for s in segs] == [s["text"] for s in ref], name
    for g, w in zip(segs, ref):
        assert g["tokens"] == w["tokens"], (name, g["text"])
        assert abs(g["start"] - w["start"]) <= 0.02 + 1e-9 and abs(g["end"] - w["end"]) <= 0.02 + 1e-9, (name, g, w)
    check_words(doc.get("words", []), [x for s in ref for x in s["words"]], name, stats)


def report(stats):
    print(f"word times identical to the reference: {stats['same']}/{stats['times']}; "
          f"largest probability difference {stats['dp']:.2g}")
    assert stats["same"] >= 0.95 * stats["times"], stats


@pytest.fixture(scope="module")
def greedy(wavs):
    return verbose(sorted(CLIPS), wavs, 1)


def test_greedy_words_equal_faster_whispers_on_every_clip_long_form_included(greedy):
    stats = {"times": 0, "same": 0, "dp": 0.0}
    for name, doc in greedy.items():
        check_doc(doc, REF[name]["beam1"], name, stats)
    report(stats)


def test_beam_search_words_equal_faster_whispers(wavs):
    stats = {"times": 0, "same": 0, "dp": 0.0}
    for name, doc in verbose(SHORT, wavs, 5).items():
        check_doc(doc, REF[name]["beam5"], name, stats)
    report(stats)


@pytest.mark.parametrize("fmt,clip", [("srt", "long"), ("vtt", "jfk")])
def test_srt_and_vtt_keep_one_cue_per_segment(fmt, clip, wavs, greedy):
    cues = parse_cues(transcribe("-m", MODEL, "--beam", "1", "--word-timestamps", "--format", fmt, str(wavs[clip])),
                      fmt == "vtt")
    segs = greedy[clip]["segments"]
    assert [c[2] for c in cues] == [s["text"].strip() for s in segs]
    assert all(abs(a - s["start"]) < 1e-3 and abs(b - s["end"]) < 1e-3 for (a, b, _), s in zip(cues, segs))


def test_text_and_json_formats_are_the_transcript(wavs, greedy):
    assert transcribe("-m", MODEL, "--beam", "1", "--word-timestamps", str(wavs["jfk"])) == greedy["jfk"]["text"] + "\n"
    doc = json.loads(transcribe("-m", MODEL, "--beam", "1", "--word-timestamps", "--format", "json", str(wavs["jfk"])))
    assert doc == {"text": greedy["jfk"]["text"]}


@pytest.fixture(scope="module")
def oai():
    s = Server("--stt-model", f"tiny={MODEL}", port=free_port(), key=KEY, env={"SARAGOSSA_LOG": "warn"})
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0, timeout=600)
    s.stop()


def test_openai_client_gets_words_with_timestamp_granularities(oai):
    stats = {"times": 0, "same": 0, "dp": 0.0}
    ref = REF["jfk"]["beam5"]
    v = oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]), response_format="verbose_json",
                                        timestamp_granularities=["word"])
    check_words([w.model_dump() for w in v.words], [x for s in ref for x in s["words"]], "jfk", stats)
    assert [s.text for s in v.segments] == [s["text"] for s in ref]
    both = oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]),
                                           response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert [w.word for w in both.words] == [w.word for w in v.words]
    assert [(s.start, s.end) for s in both.segments] == [(s["start"], s["end"]) for s in ref]
    # segments only: no words
    seg = oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]),
                                          response_format="verbose_json", timestamp_granularities=["segment"])
    assert not getattr(seg, "words", None)
    report(stats)


def test_word_granularity_needs_verbose_json(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.audio.transcriptions.create(model="tiny", file=("jfk.wav", CLIPS["jfk"][0]), response_format="json",
                                        timestamp_granularities=["word"])
    assert "verbose_json" in str(e.value)
