#!/usr/bin/env python3
"""Writes tests/fixtures/whisper_xattn/cross_attn.safetensors: transformers' cross-attention
weights of the random-weight Whisper fixture (tests/fixtures/whisper), for sg_whisper_cross_attn.

  ids      int32 [T]: the decoder tokens (the fixture's prompt then its greedy tokens)
  heads    int32 [K][2]: the (layer, head) pairs asked for
  weights  float32 [K][T][N]: softmax(q k^T / sqrt(hd)) of those heads, from
           WhisperForConditionalGeneration(output_attentions=True, attn_implementation="eager"),
           float32, on the fixture's input_features

usage: /path/to/venv-with-torch-and-transformers/bin/python tools/make_whisper_xattn.py [OUT_DIR]
"""
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADS = [[0, 1], [1, 0], [1, 3]]


def main(argv):
    import safetensors.numpy
    import torch
    from transformers import WhisperForConditionalGeneration

    fix = ROOT / "tests" / "fixtures" / "whisper"
    out = pathlib.Path(argv[0]) if argv else ROOT / "tests" / "fixtures" / "whisper_xattn"
    out.mkdir(parents=True, exist_ok=True)
    ref = safetensors.numpy.load_file(str(fix / "ref.safetensors"))
    m = WhisperForConditionalGeneration.from_pretrained(str(fix), torch_dtype=torch.float32, attn_implementation="eager").eval()
    ids = np.concatenate([ref["decoder_input_ids"], ref["greedy"]]).astype(np.int32)
    with torch.no_grad():
        o = m(input_features=torch.from_numpy(ref["input_features"])[None], decoder_input_ids=torch.from_numpy(ids.astype(np.int64))[None],
              output_attentions=True)
    w = np.stack([o.cross_attentions[L][0, h].numpy() for L, h in HEADS]).astype(np.float32)
    safetensors.numpy.save_file({"ids": ids, "heads": np.array(HEADS, dtype=np.int32), "weights": w},
                                str(out / "cross_attn.safetensors"))
    print(w.shape, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
