"""tools/make_random_model.py --gguf writes GGUF files without the gguf package (the speed
comparison with llama.cpp runs where that package is missing). The gguf package is the
reference here: its reader must find the tensors, shapes, types and tokenizer arrays the file
should have, its dequantizer the intended value distribution, and the tool's own metadata reader
must agree with it; saragossa must load and run the file."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tool_util import load_tool

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")
TOOL = ROOT / "tools" / "make_random_model.py"


def tool():
    return load_tool("make_random_model")


def byte_chars():
    """GPT-2's byte -> printable character table (byte-level BPE vocabularies store these)."""
    table = load_tool("tiktoken_to_hf").bytes_to_unicode()
    return [table[b] for b in range(256)]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A small byte-level (gpt2, pre qwen2) vocabulary GGUF written with the gguf package."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.gguf"
    tokens = byte_chars() + ["Ġt", "he", "Ġthe", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 3) + [3] * 3)
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_eos_token_id(len(tokens) - 1)
    w.add_bos_token_id(len(tokens) - 3)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tokens


def test_random_gguf_metadata_reader_agrees_with_the_gguf_package(vocab):
    path, _ = vocab
    ours = tool().read_gguf_kvs(path)
    ref = gguf.GGUFReader(str(path))
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert sorted(ours) == sorted(keys)
    for k in keys:
        want = ref.fields[k].contents()
        got = ours[k][1]
        if isinstance(got, bytes):
            got = got.decode()
        elif isinstance(got, list):
            got = [x.decode() if isinstance(x, bytes) else x for x in got]
        elif isinstance(got, np.ndarray):
            got = got.tolist()
        assert got == want, k


def dequant(t):
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)


# Layers whose attn_v and ffn_down(_exps) llama-quantize's Q4_K_M makes Q6_K in a 10-layer
# qwen3 / qwen3moe model (read off `llama-quantize --dry-run ... Q4_K_M`, llama.cpp 0.3.36)
Q6K_LAYERS_OF_10 = {0, 3, 6, 8, 9}
L = 10


@pytest.mark.parametrize("arch", ["qwen3", "qwen3moe"])
@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_k_m"])
def test_random_gguf_has_llama_cpp_layout_and_runs(vocab, tmp_path, arch, wtype):
    path, tokens = vocab
    r = subprocess.run([sys.executable, str(TOOL), arch, "--tiny", "--layers", str(L), "--gguf", str(path),
                        "--gguf-type", wtype, "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    f = tmp_path / f"{arch}-random-tiny-{L}l-{'Q4_K_M' if wtype == 'q4_k_m' else wtype}.gguf"
    g = gguf.GGUFReader(str(f))

    def kv(k):
        return g.fields[k].contents()

    assert kv("general.architecture") == arch
    assert kv(f"{arch}.block_count") == L and kv(f"{arch}.embedding_length") == 256
    assert kv("general.file_type") == {"f16": 1, "q8_0": 7, "q4_k_m": 15}[wtype]
    assert kv(f"{arch}.attention.head_count") == 4 and kv(f"{arch}.attention.head_count_kv") == 2
    assert kv(f"{arch}.attention.key_length") == 64
    V = 320  # 262 tokens padded to a multiple of 64
    toks = kv("tokenizer.ggml.tokens")
    assert toks[:len(tokens)] == tokens and toks[len(tokens):] == [f"[PAD{i}]" for i in range(len(tokens), V)]
    types = kv("tokenizer.ggml.token_type")
    assert len(types) == V and set(types[len(tokens):]) == {5}
    assert kv("tokenizer.ggml.merges") == ["Ġ t", "h e", "Ġt he"]
    assert kv("tokenizer.ggml.eos_token_id") == len(tokens) - 1

    want = {"token_embd.weight": (256, V), "output.weight": (256, V), "output_norm.weight": (256,)}
    for i in range(L):
        p = f"blk.{i}."
        want.update({p + "attn_norm.weight": (256,), p + "ffn_norm.weight": (256,),
                     p + "attn_q.weight": (256, 256), p + "attn_k.weight": (256, 128),
                     p + "attn_v.weight": (256, 128), p + "attn_output.weight": (256, 256),
                     p + "attn_q_norm.weight": (64,), p + "attn_k_norm.weight": (64,)})
        if arch == "qwen3":
            want.update({p + "ffn_gate.weight": (256, 512), p + "ffn_up.weight": (256, 512),
                         p + "ffn_down.weight": (512, 256)})
        else:
            assert kv(f"{arch}.expert_count") == 16 and kv(f"{arch}.expert_used_count") == 2
            want.update({p + "ffn_gate_inp.weight": (256, 16), p + "ffn_gate_exps.weight": (256, 256, 16),
                         p + "ffn_up_exps.weight": (256, 256, 16), p + "ffn_down_exps.weight": (256, 256, 16)})
    got = {t.name: tuple(int(x) for x in t.shape) for t in g.tensors}
    assert got == want
    T = gguf.GGMLQuantizationType

    def qtype(name):
        if wtype != "q4_k_m":
            return T.F16 if wtype == "f16" else T.Q8_0
        if name == "output.weight":
            return T.Q6_K
        if (".attn_v." in name or ".ffn_down" in name) and int(name.split(".")[1]) in Q6K_LAYERS_OF_10:
            return T.Q6_K
        return T.Q4_K

    for t in g.tensors:
        x = dequant(t)
        if "norm" in t.name:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and np.all(x == 1.0), t.name
            continue
        router = t.name.endswith("ffn_gate_inp.weight")
        assert t.tensor_type == (T.F32 if router else qtype(t.name)), t.name
        assert 0.018 < x.std() < 0.022 and abs(x.mean()) < 0.002, (t.name, x.std(), x.mean())

    r = subprocess.run([BIN, "bench", "-m", str(f), "-p", "8", "-n", "2", "-r", "1", "--backend", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"({arch})" in r.stdout and "tg2" in r.stdout, r.stdout
