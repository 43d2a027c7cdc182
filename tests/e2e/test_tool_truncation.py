"""Forced tool calls that max_tokens (or a stop string) cuts short, through the official `openai`
and `anthropic` clients against one `saragossa serve` (the agent test model: a tiny fixture with
Qwen3's real template, forced to call by the grammar). Whatever the cut, a call is reported only
once its arguments are complete and valid for its schema; an unfinished one is reported the way
each API reports truncation (finish_reason "length", stop_reason "max_tokens"), never as a call
and never as text; both APIs agree on the calls that completed; no text carries the call syntax
or the blanks the grammar lets a call start with."""
import json

import anthropic
import jsonschema
import openai
import pytest

from agent_util import srv, oai, ac  # noqa: F401 (fixtures)
from server_util import KEY

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
# At temperature 0 the model answers this with two calls (parallel calls are allowed).
MSG = [{"role": "user", "content": "Tell me the weather in three cities."}]
# The Anthropic route writes a tool as {"name", "parameters", "description"}: the same order here
# renders the same prompt, so both APIs answer the same generation.
OAI_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                               "description": "Weather in a city"}}]
ANT_TOOLS = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
# From a cut inside the first start marker, through one inside the arguments, to one complete
# call followed by a second, cut, and both complete.
CUTS = [2, 9, 14, 28, 45, 80, 125, 160, 240]


def oai_kw(max_tokens, **kw):
    return dict(model="q3", messages=MSG, tools=OAI_TOOLS, tool_choice="required", max_tokens=max_tokens, temperature=0,
                extra_body={"enable_thinking": False}, **kw)


def ant_kw(max_tokens, **kw):
    return dict(model="q3", max_tokens=max_tokens, messages=MSG, tools=ANT_TOOLS, tool_choice={"type": "any"},
                extra_body={"thinking": {"type": "disabled"}, "temperature": 0}, **kw)


def no_text(t):
    """A forced call leaves no answer text: not the call's syntax, nor the blanks before it."""
    assert t == "", repr(t)


ANSWERS = {}  # max_tokens -> (finish, calls) of the OpenAI whole answers (the generation is greedy)


def oai_answer(oai, max_tokens, **kw):
    r = oai.chat.completions.create(**oai_kw(max_tokens, **kw))
    ch = r.choices[0]
    assert r.usage.completion_tokens <= max_tokens
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []]
    no_text(ch.message.content or "")
    if not kw:
        ANSWERS[max_tokens] = (ch.finish_reason, calls)
    return ch.finish_reason, calls


ANT_ANSWERS = {}


def ant_answer(ac, max_tokens, **kw):
    r = ac.messages.create(**ant_kw(max_tokens, **kw))
    for b in r.content:
        assert b.type in ("text", "tool_use"), b
        if b.type == "text":
            no_text(b.text)
    out = r.stop_reason, [(b.name, b.input) for b in r.content if b.type == "tool_use"]
    if not kw:
        ANT_ANSWERS[max_tokens] = out
    return out


def check_calls(calls):
    for name, args in calls:
        assert name == "get_weather"
        jsonschema.validate(args, WEATHER)


@pytest.mark.parametrize("max_tokens", CUTS)
def test_cut_call_is_reported_as_truncation_by_both_apis(oai, ac, max_tokens):
    finish, calls = oai_answer(oai, max_tokens)
    check_calls(calls)
    # the grammar forces a call: the answer ends with one, or was cut ("length")
    assert finish in ("tool_calls", "length"), finish
    assert calls or finish == "length"
    stop, uses = ant_answer(ac, max_tokens)
    check_calls(uses)
    assert stop in ("tool_use", "max_tokens"), stop
    # the same generation (temperature 0) answered in each API's words
    assert uses == calls
    assert (stop == "tool_use") == (finish == "tool_calls")


def test_both_apis_render_the_same_prompt(oai, ac):
    r = oai.chat.completions.create(**oai_kw(1))
    a = ac.messages.create(**ant_kw(1))
    assert r.usage.prompt_tokens == a.usage.input_tokens + (a.usage.cache_read_input_tokens or 0)


def test_the_cuts_cover_each_case(oai):
    """The CUTS above do cut before any call, inside one, and after a complete one."""
    seen = set()
    for mt in CUTS:
        finish, calls = ANSWERS[mt] if mt in ANSWERS else oai_answer(oai, mt)
        seen.add((finish, len(calls)))
    assert {("length", 0), ("length", 1), ("tool_calls", 2)} <= seen, seen


def oai_stream(oai, max_tokens, **kw):
    calls, finish, text = {}, None, ""
    for chunk in oai.chat.completions.create(stream=True, **oai_kw(max_tokens, **kw)):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        text += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            c["name"] += (tc.function and tc.function.name) or ""
            c["arguments"] += (tc.function and tc.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    no_text(text)
    return finish, [c for _, c in sorted(calls.items())]


@pytest.mark.parametrize("max_tokens", CUTS)
def test_streams_end_with_the_truncation_and_agree_with_the_whole_answers(oai, ac, max_tokens):
    finish, calls = ANSWERS.get(max_tokens) or oai_answer(oai, max_tokens)
    sfinish, scalls = oai_stream(oai, max_tokens)
    assert sfinish == finish
    # the completed calls stream as they are in the whole answer; a cut one was announced
    # before it was cut, and only the finish ("length") says it is unfinished
    assert [(c["name"], json.loads(c["arguments"])) for c in scalls[:len(calls)]] == calls
    assert len(scalls) - len(calls) <= (1 if finish == "length" else 0)
    stop, uses = ANT_ANSWERS.get(max_tokens) or ant_answer(ac, max_tokens)
    with ac.messages.stream(**ant_kw(max_tokens)) as s:
        final = s.get_final_message()
    assert final.stop_reason == stop
    for b in final.content:
        if b.type == "text":
            no_text(b.text)
    suses = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert suses[:len(uses)] == uses
    assert len(suses) - len(uses) <= (1 if stop == "max_tokens" else 0)


def test_a_stop_string_inside_a_call_cuts_it(oai, ac):
    finish, calls = oai_answer(oai, 160, stop=['"unit"'])
    assert (finish, calls) == ("stop", [])
    r = ac.messages.create(**ant_kw(160, stop_sequences=['"unit"']))
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == '"unit"'
    assert [b for b in r.content if b.type == "tool_use"] == []
    for b in r.content:
        no_text(b.text)
