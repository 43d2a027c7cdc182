"""Test models for the agent tests: a tiny fixture model given a tokenizer whose vocabulary holds
Qwen3's agent markers (<think>, </think>, <tool_call>, </tool_call>) as ordinary added tokens, as
Qwen3's own tokenizer has them, and Qwen3's real chat template (tests/e2e/data/templates)."""
import json
import shutil
from pathlib import Path

import anthropic
import openai
import pytest

from server_util import CORPUS, KEY, ROOT

MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


def make_qwen3_agent_model(dest, fixture="qwen3"):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    src = ROOT / "tests" / "fixtures" / fixture
    vocab_size = json.loads((src / "config.json").read_text())["vocab_size"]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "model.safetensors", dest / "model.safetensors")
    # Qwen3's template renders the tools into a system prompt of several hundred tokens: the
    # fixture's 256 positions are widened (the weights do not depend on it; rope is unscaled).
    cfg = json.loads((src / "config.json").read_text())
    cfg["max_position_embeddings"] = 4096
    (dest / "config.json").write_text(json.dumps(cfg))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(MARKERS), special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = CORPUS + ['{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'] * 10
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])
    assert tok.get_vocab_size() <= vocab_size
    tok.save(str(dest / "tokenizer.json"))
    template = (ROOT / "tests" / "e2e" / "data" / "templates" / "qwen3.jinja").read_text()
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "chat_template": template, "add_bos_token": False}))
    return dest


def start_agent_server(tmp_path_factory):
    """A serve process on the agent test model (named "q3", context 2048), TCP with KEY."""
    from server_util import KEY, Server, free_port

    d = tmp_path_factory.mktemp("agent")
    model = make_qwen3_agent_model(d / "q3")
    return Server("--model", f"q3={model}", "--ctx", "2048", socket_path=str(d / "s.sock"), port=free_port(), key=KEY)


def think_token_id(srv):
    """The id of <think> in the test vocabulary."""
    with srv.client() as c:
        ids = c.post("/tokenize", json={"model": "q3", "prompt": "<think>", "add_special": False}).json()["tokens"]
    assert len(ids) == 1
    return ids[0]


# The fixtures of the agent tests (a module imports those it uses): one server a test module, and the
# official clients pointed at it.
@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start_agent_server(tmp_path_factory)
    yield s
    s.stop()


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def ac(srv):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=KEY, max_retries=0)
