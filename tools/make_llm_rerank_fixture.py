#!/usr/bin/env python3
"""Build tests/fixtures/llm_reranker: a Qwen3-Reranker-style LLM reranker on the tiny random Qwen3 fixture.

Runs where torch, transformers, tokenizers and sentence-transformers are installed (a CPU install is
enough). The weights are tests/fixtures/qwen3's (not copied: the test links them); this folder holds
what makes them a reranker the way sentence-transformers loads one: a 384-token byte-level BPE
tokenizer trained on a small corpus (so "yes" and "no" are single tokens) and a chat template that
renders a (query, document) pair, given as messages with the roles "query" and "document", into
Qwen3-Reranker's prompt (its system line, <Instruct>, <Query>, <Document>, then the assistant's
empty thinking block). The reference is CrossEncoder.predict on that folder, in float32: a causal
LM becomes a LogitScore reranker (logit("yes") - logit("no") at the last position) and one label
gets the sigmoid.

    ref.json  {"query", "documents", "scores", "logits" (logit yes - logit no), "prompt_ids" (each
               pair's token ids as transformers renders and tokenizes it), "true_token_id",
               "false_token_id", versions}

Usage: python tools/make_llm_rerank_fixture.py
"""
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "llm_reranker"
SRC = ROOT / "tests" / "fixtures" / "qwen3"

TEMPLATE = (
    '{%- set ns = namespace(query="", document="") -%}'
    '{%- for m in messages -%}'
    '{%- set text = m.content if m.content is string else m.content[0].text -%}'
    '{%- if m.role == "query" -%}{%- set ns.query = text -%}'
    '{%- elif m.role == "document" -%}{%- set ns.document = text -%}{%- endif -%}'
    '{%- endfor -%}'
    '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct '
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    '<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n'
    '<Query>: {{ ns.query }}\n<Document>: {{ ns.document }}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
)
CORPUS = """Judge whether the Document meets the requirements based on the Query and the Instruct provided.
Note that the answer can only be yes or no. yes no yes no yes no yes no Yes No
Given a web search query, retrieve relevant passages that answer the query.
What is the capital of France? Paris is the capital city of France. London is the capital of England.
Cats sleep most of the day. The river in Paris is the Seine. Neural ranking models score a query.
The quick brown fox jumps over the lazy dog. Football team wins the game!""".split("\n")
QUERY = "What is the capital of France?"
DOCS = [
    "Paris is the capital city of France.",
    "London is the capital of England.",
    "Cats sleep most of the day.",
    "The river in Paris is the Seine.",
    "Neural ranking models score a query and a document together.",
    "",
    "Football team wins the game!",
    "zzqx unknownword 42",
]


def main():
    import torch
    import transformers
    import sentence_transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    vocab_size = json.loads((SRC / "config.json").read_text())["vocab_size"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    assert tok.get_vocab_size() <= vocab_size
    OUT.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(OUT)
    cfg = json.loads((SRC / "config.json").read_text())
    (OUT / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    yes, no = fast.convert_tokens_to_ids("yes"), fast.convert_tokens_to_ids("no")
    assert yes != fast.unk_token_id and no != fast.unk_token_id and yes is not None and no is not None, (yes, no)

    with tempfile.TemporaryDirectory() as tmp:
        for f in OUT.iterdir():
            shutil.copy(f, Path(tmp) / f.name)
        shutil.copy(SRC / "model.safetensors", Path(tmp) / "model.safetensors")
        ce = sentence_transformers.CrossEncoder(tmp, device="cpu", model_kwargs={"dtype": torch.float32})
        pairs = [(QUERY, d) for d in DOCS]
        scores = ce.predict(pairs, convert_to_numpy=True, batch_size=1)
        raw = ce.predict(pairs, convert_to_numpy=True, batch_size=1, activation_fn=torch.nn.Identity())
        prompt_ids = [fast.apply_chat_template([{"role": "query", "content": QUERY}, {"role": "document", "content": d}],
                                               tokenize=True, return_dict=True)["input_ids"] for d in DOCS]
    ref = {"query": QUERY, "documents": DOCS, "scores": [float(s) for s in scores], "logits": [float(x) for x in raw],
           "prompt_ids": prompt_ids, "true_token_id": yes, "false_token_id": no,
           "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                        "sentence_transformers": sentence_transformers.__version__}}
    (OUT / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")
    print("wrote", OUT, "scores", ref["scores"])


if __name__ == "__main__":
    main()
