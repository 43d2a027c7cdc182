"""Speculative decoding in the server with the things that shape an answer: a JSON schema, a tool-call
grammar, stop strings, streaming (only verified tokens are sent: the streamed tokens and their
log-probabilities are the non-streamed answer's) and the prefix cache with sessions (a later turn reuses
the earlier turns' state and answers as without speculation). Each drafter (n-gram, a predicted output,
a draft model) gives the answer of plain decoding, greedy."""
import json

import pytest

from server_util import KEY, Server, free_port, make_test_model

EDIT = ("Hello, world! The quick brown fox jumps over the lazy dog. What is the capital of France? "
        "Paris is the capital of France. Hello, world! The quick brown fox")
DRAFTERS = [{"speculative": "none"}, {"speculative": "ngram"}, {"speculative": {"type": "draft", "draft_max": 4}},
            {"speculative": "ngram", "prediction": {"type": "content", "content": '{"name": "Paris", "n": 1} ' + EDIT}}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("specc")
    model = str(make_test_model("qwen3", d / "q3", 384))
    # the draft model is the target itself: its guesses are right, so long runs of them are verified
    s = Server("--model", f"q3={model}", "--ctx", "256", "--draft-model", model, "--draft-max", "6",
               port=free_port(), key=KEY, env={"RETI_SERVE_PREFIX_BLOCK_TOKENS": "16"})
    yield s
    s.stop()


def post(srv, body, path="/v1/chat/completions", headers=None):
    b = {"model": "q3", "messages": [{"role": "user", "content": EDIT}], "max_tokens": 40, "temperature": 0, **body}
    with srv.client() as c:
        return c.post(path, json=b, headers=headers or {})


def outcome(r):
    body = r.json()
    if r.status_code != 200:
        return r.status_code, body["error"]["message"]
    ch = body["choices"][0]
    return r.status_code, ch["message"].get("content"), json.dumps(ch["message"].get("tool_calls")), ch["finish_reason"]


def spec_ran(r):
    d = (r.json().get("usage") or {}).get("completion_tokens_details") or {}
    return d.get("verify_steps", 0) > 0


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"},
                                           "ok": {"type": "boolean"}},
          "required": ["name", "n", "ok"], "additionalProperties": False}


def test_json_schema_answers_are_identical_with_every_drafter(srv):
    rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA, "strict": True}}
    rs = [post(srv, {"response_format": rf, "max_tokens": 80, **d}) for d in DRAFTERS]
    outs = [outcome(r) for r in rs]
    assert all(o == outs[0] for o in outs), outs
    assert any(spec_ran(r) for r in rs[1:]), "no verify step ran"
    if outs[0][0] == 200:
        v = json.loads(outs[0][1])
        assert set(v) == {"name", "n", "ok"}


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_forced_tool_call_grammar_is_identical_with_every_drafter(srv):
    tc = {"type": "function", "function": {"name": "get_weather"}}
    rs = [post(srv, {"tools": TOOLS, "tool_choice": tc, "max_tokens": 60, **d}) for d in DRAFTERS]
    outs = [outcome(r) for r in rs]
    assert all(o == outs[0] for o in outs), outs
    assert any(spec_ran(r) for r in rs[1:])


def test_stop_strings_cut_at_the_same_place_with_every_drafter(srv):
    plain = post(srv, {"speculative": "none"}).json()["choices"][0]["message"]["content"]
    assert len(plain) > 12
    # a stop string from the middle of the plain answer (not at its start, so something is sent)
    stop = plain[len(plain) // 2:len(plain) // 2 + 3]
    rs = [post(srv, {"stop": [stop, "zzzz"], **d}) for d in DRAFTERS]
    outs = [outcome(r) for r in rs]
    assert all(o == outs[0] for o in outs), outs
    assert outs[0][3] == "stop" and stop not in outs[0][1]
    assert plain.startswith(outs[0][1])
    assert any(spec_ran(r) for r in rs[1:])


def stream(srv, body):
    b = {"model": "q3", "messages": [{"role": "user", "content": EDIT}], "max_tokens": 40, "temperature": 0,
         "stream": True, "logprobs": True, "top_logprobs": 2, **body}
    text, lps = [], []
    with srv.client() as c, c.stream("POST", "/v1/chat/completions", json=b) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                text.append(ch["delta"].get("content") or "")
                lps += [(t["token"], round(t["logprob"], 4)) for t in (ch.get("logprobs") or {}).get("content") or []]
    return "".join(text), lps


def test_streaming_sends_only_verified_tokens(srv):
    full = post(srv, {"speculative": "none", "logprobs": True, "top_logprobs": 2}).json()["choices"][0]
    want = (full["message"]["content"], [(t["token"], round(t["logprob"], 4)) for t in full["logprobs"]["content"]])
    for d in DRAFTERS[1:]:
        assert spec_ran(post(srv, {"logprobs": True, "top_logprobs": 2, **d})), d
        got = stream(srv, d)
        # no rejected guess was ever sent: the streamed tokens are the answer's, one each
        assert got == want, d


def test_prefix_cache_and_sessions_keep_working_with_speculation(srv):
    def convo(spec, session):
        msgs = [{"role": "user", "content": EDIT}]
        out = []
        for q in ["And Spain?", "Hello, world! The quick brown fox?"]:
            r = post(srv, {"messages": msgs, "max_tokens": 12, **spec}, headers={"x-saragossa-session": session})
            a = r.json()["choices"][0]["message"]["content"]
            out.append((a, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]))
            msgs = msgs + [{"role": "assistant", "content": a}, {"role": "user", "content": q}]
        return out

    plain = convo({"speculative": "none"}, "s-plain")
    for spec, sess in (({"speculative": "ngram"}, "s-ngram"), ({"speculative": "draft"}, "s-draft")):
        got = convo(spec, sess)
        assert [a for a, _ in got] == [a for a, _ in plain], spec
        # the second turn reuses the first turn's state
        assert got[1][1] > 0, got
