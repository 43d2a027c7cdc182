"""The finer points of the OpenAI API that clients read, through the official `openai` client against
a real `saragossa serve` on the tiny fixture models: logprobs equal to transformers' log-softmax
(tests/fixtures/qwen3/ref.safetensors) with OpenAI's shapes (bytes, top_logprobs), n choices (real,
generated one after the other, repeatable per seed), seed, stream_options.include_usage, and the
/v1/models fields."""
import math

import numpy as np
import openai
import pytest
from safetensors.numpy import load_file

from agent_util import oai  # noqa: F401 (fixture: the openai client on this module's srv)
from server_util import KEY, ROOT, Server, free_port, make_test_model

HELLO = [{"role": "user", "content": "Hello, what is the capital of France?"}]
REF = load_file(str(ROOT / "tests" / "fixtures" / "qwen3" / "ref.safetensors"))


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("details")
    s = Server("--model", f"llama={make_test_model('llama', d / 'llama', 320)}",
               "--model", f"qwen={make_test_model('qwen3', d / 'qwen3', 384)}",
               socket_path=str(d / "s.sock"), port=free_port(), key=KEY)
    yield s
    s.stop()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


@pytest.mark.parametrize("k", [4, 9, 13])
def test_completion_logprobs_are_the_reference_log_softmax(oai, k):
    """Token-id prompts (no template, no BOS): the next token's logprob and its top 5 alternatives are
    transformers' log-softmax of its logits at that position."""
    ids = [int(t) for t in REF["input_ids"][:k]]
    ref = log_softmax(REF["logits"][k - 1])
    tol = 2e-3 * float(np.abs(REF["logits"][k - 1]).max())
    r = oai.completions.create(model="qwen", prompt=ids, max_tokens=1, temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    best = int(np.argmax(ref))
    assert abs(lp.token_logprobs[0] - ref[best]) < tol, (lp.token_logprobs[0], ref[best])
    got_top = sorted(lp.top_logprobs[0].values(), reverse=True)
    want_top = sorted(ref, reverse=True)[:5]
    assert len(got_top) == 5 and np.allclose(got_top, want_top, atol=tol), (got_top, want_top)
    if k == len(REF["input_ids"]):  # the reference's own greedy continuation starts here
        assert best == int(REF["greedy"][0])


def test_chat_logprobs_shapes_bytes_and_stream_agree(oai):
    r = oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=8, temperature=0, logprobs=True,
                                    top_logprobs=4)
    content = r.choices[0].logprobs.content
    assert len(content) == 8
    # the tokens' bytes make the answer (a sequence the model never finished is not text)
    made = bytes(b for e in content for b in e.bytes).decode("utf-8", "replace")
    assert made.replace("\ufffd", "") == r.choices[0].message.content.replace("\ufffd", "")
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 4
        for t in [e, *e.top_logprobs]:
            # bytes: the token's own; a token that is part of a character is named by its bytes
            if t.token.startswith("bytes:"):
                assert t.token == "bytes:" + "".join(f"\\x{b:02x}" for b in t.bytes)
            else:
                assert bytes(t.bytes).decode() == t.token
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-4
    streamed = []
    for ch in oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=8, temperature=0, logprobs=True,
                                          top_logprobs=4, stream=True):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            streamed += ch.choices[0].logprobs.content
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [(e.token, round(e.logprob, 5)) for e in content]
    # logprobs without alternatives
    r0 = oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=3, temperature=0, logprobs=True)
    assert all(e.top_logprobs == [] for e in r0.choices[0].logprobs.content)
    assert oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=3).choices[0].logprobs is None


def test_n_choices_are_the_single_answers_of_seed_plus_index(oai):
    kw = dict(model="llama", messages=HELLO, max_tokens=10, temperature=1.0)
    r = oai.chat.completions.create(n=3, seed=40, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    singles = [oai.chat.completions.create(seed=40 + i, **kw) for i in range(3)]
    assert [c.message.content for c in r.choices] == [s.choices[0].message.content for s in singles]
    assert len({c.message.content for c in r.choices}) > 1, "the choices are different samples"
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_n_choices_streamed_with_usage(oai):
    kw = dict(model="llama", messages=HELLO, max_tokens=6, temperature=1.0, seed=7, n=2)
    whole = oai.chat.completions.create(**kw)
    text, finish, roles = {0: "", 1: ""}, {}, {}
    chunks = list(oai.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    for ch in chunks[:-1]:
        assert len(ch.choices) == 1
        c = ch.choices[0]
        if c.delta.role:
            roles[c.index] = c.delta.role
        text[c.index] += c.delta.content or ""
        if c.finish_reason:
            assert c.index not in finish
            finish[c.index] = c.finish_reason
    assert roles == {0: "assistant", 1: "assistant"} and finish == {0: "length", 1: "length"}
    assert [text[0], text[1]] == [c.message.content for c in whole.choices]
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 12 == whole.usage.completion_tokens
    # without include_usage no usage chunk
    plain = list(oai.chat.completions.create(stream=True, **kw))
    assert all(ch.choices and ch.usage is None for ch in plain)


def test_completions_n_and_seed(oai):
    kw = dict(model="qwen", prompt="The capital of France is", max_tokens=6, temperature=0.9, seed=3)
    r = oai.completions.create(n=2, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == oai.completions.create(**kw).choices[0].text
    streamed = {0: "", 1: ""}
    for ch in oai.completions.create(n=2, stream=True, **kw):
        for c in ch.choices:
            streamed[c.index] += c.text
    assert [streamed[0], streamed[1]] == [c.text for c in r.choices]


def test_seed_repeats_streamed_and_whole(oai):
    kw = dict(model="qwen", messages=HELLO, max_tokens=12, temperature=1.2, top_p=0.9, seed=99)
    a = oai.chat.completions.create(**kw).choices[0].message.content
    b = "".join(ch.choices[0].delta.content or "" for ch in oai.chat.completions.create(stream=True, **kw) if ch.choices)
    assert a == b == oai.chat.completions.create(**kw).choices[0].message.content


def test_n_out_of_range_is_400(oai):
    for n in (0, 17):
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=2, n=n)
        assert e.value.param == "n" and f"'n' = {n} is outside [1, 16]" in str(e.value)


def test_models_fields_clients_read(oai, srv):
    data = oai.models.list().data
    assert [m.id for m in data] == ["llama", "qwen"]
    for m in data:
        assert m.object == "model" and isinstance(m.created, int) and m.owned_by == "saragossa"
        got = oai.models.retrieve(m.id)
        assert (got.id, got.object, got.owned_by) == (m.id, "model", "saragossa")
    # a resident model reports when it was loaded
    oai.chat.completions.create(model="qwen", messages=HELLO, max_tokens=1)
    assert oai.models.retrieve("qwen").created > 1_600_000_000
    with pytest.raises(openai.NotFoundError) as e:
        oai.models.retrieve("gpt-9")
    assert e.value.code == "model_not_found" and e.value.param == "model"
