"""Dumps a GGUF vocabulary as token byte strings for bench/grammar_bench.c.

Output format (little-endian): u32 n_vocab, u32 eot_id, then per token: u8 kind (0 normal,
1 special: control/unknown/unused tokens), u32 len, len bytes. SentencePiece's U+2581 becomes a
space and byte tokens <0xXX> become that byte, as the detokenizer produces them.

    .venv/bin/python bench/grammar_vocab.py MODEL.gguf OUT.bin
"""
import re
import struct
import sys

import gguf


def field(r, name):
    f = r.fields[name]
    return f


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    tf = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(tf.parts[i]) for i in tf.data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    eot = None
    for i, t in enumerate(tokens):
        if t == b"<end_of_turn>":
            eot = i
    if eot is None:
        eot = int(r.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    byte_re = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")
    with open(dst, "wb") as out:
        out.write(struct.pack("<II", len(tokens), eot))
        for t, ty in zip(tokens, types):
            special = ty in (2, 3, 5)  # unknown, control, unused
            m = byte_re.match(t)
            if ty == 6 and m:
                b = bytes([int(m.group(1), 16)])
            else:
                b = t.replace("\u2581".encode(), b" ")
            out.write(struct.pack("<BI", 1 if special else 0, len(b)))
            out.write(b)
    print(f"{len(tokens)} tokens, end of turn {eot}, {sum(1 for t in types if t in (2, 3, 5))} special")


if __name__ == "__main__":
    main()
