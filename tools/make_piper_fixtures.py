"""Reference fixtures for the Piper voice support, made with Piper's own phonemizer
(`piper-phonemize` from PyPI) and onnxruntime on the real en_US-joe-medium voice:

  tests/fixtures/piper/phonemes.json  the voice's espeak voice and phoneme_id_map, and for a set
                                      of texts the sentences' phonemes and ids as Piper makes them
  tests/fixtures/piper/wave.json      a short sentence's ids and onnxruntime's waveform with
                                      noise_scale = noise_w = 0 (length_scale 1), for parity

    PYTHONPATH=<dir with piper_phonemize> python3 tools/make_piper_fixtures.py [VOICE.onnx]
"""
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "piper"

TEXTS = [
    "Hello there. How are you today?",
    "Wait, what: this; that! Okay.",
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore, doesn't she?",
    "Text to speech runs on the CPU in real time!",
    "A voice loop wants the first audio fast; streaming helps.",
    "Numbers like 42 and 1999 are read out.",
    "\"Quoted words,\" he said (quietly).",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9.",
    "One line\nand the next line.",
    "It's a beautiful day in the neighbourhood.",
    "Why? Because!",
]


def ids_of(phonemes, id_map):
    ids = list(id_map["^"]) + list(id_map["_"])
    for p in phonemes:
        if p in id_map:
            ids += list(id_map[p]) + list(id_map["_"])
    return ids + list(id_map["$"])


def main():
    import piper_phonemize as pp

    onnx_path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                             pathlib.Path.home() / ".cache/saragossa/models/piper-joe/en_US-joe-medium.onnx")
    cfg = json.loads(pathlib.Path(str(onnx_path) + ".json").read_text())
    voice = cfg["espeak"]["voice"]
    id_map = cfg["phoneme_id_map"]
    cases = []
    for t in TEXTS:
        sents = [s for s in pp.phonemize_espeak(t, voice) if s]
        cases.append({"text": t, "phonemes": ["".join(s) for s in sents], "ids": [ids_of(s, id_map) for s in sents]})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "phonemes.json").write_text(json.dumps({"voice": voice, "phoneme_id_map": id_map, "cases": cases},
                                                  ensure_ascii=False, indent=1) + "\n")

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    text = "Hello world."
    sents = [s for s in pp.phonemize_espeak(text, voice) if s]
    ids = ids_of(sents[0], id_map)
    x = np.array([ids], dtype=np.int64)
    wav = sess.run(None, {"input": x, "input_lengths": np.array([len(ids)], dtype=np.int64),
                          "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)})[0].reshape(-1)
    (OUT / "wave.json").write_text(json.dumps({
        "text": text, "ids": ids, "noise_scale": 0.0, "length_scale": 1.0, "noise_w": 0.0,
        "sample_rate": cfg["audio"]["sample_rate"], "n_samples": int(wav.size),
        "samples": [round(float(v), 6) for v in wav]}) + "\n")
    print(f"{len(cases)} texts; waveform of {wav.size} samples, peak {np.abs(wav).max():.3f}")


if __name__ == "__main__":
    main()
