"""Tool calls written as a bare JSON object, without the <tool_call> tags of the Hermes syntax (small
Qwen models do so when the choice is theirs), through the official `openai` and `ollama` clients.
The fixture model (Qwen3's template, Hermes syntax) is steered into writing exactly such an object
by a JSON Schema response format, while tool_choice stays "auto": what is checked is that the server
reports it as the tool call it is, whole and streamed, and leaves JSON that is not a call as text."""
import json

import jsonschema
import ollama
import openai
import pytest

from agent_util import srv, oai  # noqa: F401 (fixtures)
from server_util import KEY

MSG = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 6}}, "required": ["tz"]}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                 "parameters": WEATHER}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                              "parameters": TIME}}
# The whole answer is {"name": "get_weather", "arguments": {...}}: a call without its tags.
BARE_CALL = {"type": "object", "properties": {"name": {"enum": ["get_weather"]}, "arguments": WEATHER},
             "required": ["name", "arguments"], "additionalProperties": False}
FMT = {"type": "json_schema", "json_schema": {"name": "call", "schema": BARE_CALL, "strict": True}}
NO_THINK = {"enable_thinking": False}


def create(oai, **kw):
    args = dict(model="q3", messages=MSG, response_format=FMT, max_tokens=200, extra_body=NO_THINK)
    args.update(kw)
    return oai.chat.completions.create(**args)


@pytest.mark.parametrize("seed", [0, 1])
def test_bare_call_object_is_a_tool_call(oai, seed):
    r = create(oai, tools=[WEATHER_TOOL, TIME_TOOL], seed=seed)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert not ch.message.content
    assert len(ch.message.tool_calls) == 1
    c = ch.message.tool_calls[0]
    assert c.type == "function" and c.id and c.function.name == "get_weather"
    jsonschema.validate(json.loads(c.function.arguments), WEATHER)


def test_streamed_bare_call_equals_the_whole_one(oai):
    whole = create(oai, tools=[WEATHER_TOOL, TIME_TOOL], temperature=0).choices[0].message
    calls, content, finish = {}, "", None
    for chunk in create(oai, tools=[WEATHER_TOOL, TIME_TOOL], temperature=0, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert content.strip() == "", "no piece of the call streams as text"
    got = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    assert got == [(c.function.name, json.loads(c.function.arguments)) for c in whole.tool_calls]


def test_bare_object_naming_no_offered_tool_stays_text(oai):
    for tools in ([TIME_TOOL], None):
        kw = {"tools": tools} if tools else {}
        r = create(oai, temperature=0, **kw)
        ch = r.choices[0]
        assert ch.message.tool_calls is None
        assert ch.finish_reason == "stop"
        assert json.loads(ch.message.content)["name"] == "get_weather"


def test_bare_call_cut_by_max_tokens_is_a_truncation(oai):
    whole = create(oai, tools=[WEATHER_TOOL], temperature=0)
    assert whole.choices[0].finish_reason == "tool_calls"

    def complete(m):
        try:
            return create(oai, tools=[WEATHER_TOOL], temperature=0, max_tokens=m).choices[0].finish_reason == "tool_calls"
        except openai.BadRequestError:
            return False

    # the same answer (temperature 0) cut one token before the call object closes (the random model
    # may add blanks after it): the fewest tokens that complete the call, less one
    lo, hi = 1, whole.usage.completion_tokens
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if complete(mid) else (mid + 1, hi)
    cut = lo - 1
    ch = create(oai, tools=[WEATHER_TOOL], temperature=0, max_tokens=cut).choices[0]
    assert ch.finish_reason == "length"
    assert not ch.message.tool_calls and not ch.message.content
    content, finish, named = "", None, []
    for chunk in create(oai, tools=[WEATHER_TOOL], temperature=0, max_tokens=cut, stream=True):
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            named += [tc.function.name for tc in chunk.choices[0].delta.tool_calls or [] if tc.function.name]
            finish = chunk.choices[0].finish_reason or finish
    # the stream announced the call before it was cut: its finish reason says it is unfinished
    assert finish == "length" and content.strip() == "" and named == ["get_weather"]


def test_ollama_reports_a_bare_call_as_tool_calls(srv):
    cl = ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})
    for stream in (False, True):
        kw = dict(model="q3", messages=MSG, tools=[WEATHER_TOOL], format=BARE_CALL, think=False,
                  options={"num_predict": 200, "temperature": 0})
        if stream:
            calls, content = [], ""
            for part in cl.chat(stream=True, **kw):
                calls += part.message.tool_calls or []
                content += part.message.content or ""
        else:
            r = cl.chat(**kw)
            calls, content = r.message.tool_calls or [], r.message.content
        assert [c.function.name for c in calls] == ["get_weather"], (stream, content)
        jsonschema.validate(calls[0].function.arguments, WEATHER)
        assert not content


# ---- the real default model, which writes such calls when the choice is its own ----

QWEN_CODER = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
TOKYO = [{"role": "user", "content": "What's the weather like in Tokyo right now?"}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    """serve on Qwen2.5-Coder-0.5B-Instruct when tools/fetch_models.py has fetched it (never fetched here)."""
    import os
    from pathlib import Path

    from server_util import Server, free_port

    cache = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                 / "saragossa")
    model = cache / "models" / QWEN_CODER
    if not model.is_file():
        pytest.skip(f"{model} not fetched (tools/fetch_models.py qwen2.5-coder-0.5b)")
    d = tmp_path_factory.mktemp("coder")
    s = Server("--model", f"qc={model}", "--ctx", "4096", socket_path=str(d / "s.sock"), port=free_port(), key=KEY)
    yield s
    s.stop()


def test_default_model_bare_call_on_every_route(coder):
    import anthropic

    tool = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                             "parameters": CITY}}
    o = openai.OpenAI(base_url=f"http://127.0.0.1:{coder.port}/v1", api_key=KEY, max_retries=0)
    kw = dict(model="qc", messages=TOKYO, tools=[tool], temperature=0, max_tokens=100)
    ch = o.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "tool_calls" and not ch.message.content, ch
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls] == \
        [("get_weather", {"city": "Tokyo"})]
    args, content, finish = "", "", None
    for chunk in o.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            d = chunk.choices[0].delta
            content += d.content or ""
            args += "".join(tc.function.arguments or "" for tc in d.tool_calls or [] if tc.function)
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == "" and json.loads(args) == {"city": "Tokyo"}

    a = anthropic.Anthropic(base_url=f"http://127.0.0.1:{coder.port}", api_key=KEY, max_retries=0)
    akw = dict(model="qc", max_tokens=100, messages=TOKYO, extra_body={"temperature": 0},
               tools=[{"name": "get_weather", "description": "Get the current weather in a city", "input_schema": CITY}])
    r = a.messages.create(**akw)
    assert r.stop_reason == "tool_use", r
    assert [(b.type, b.name, b.input) for b in r.content] == [("tool_use", "get_weather", {"city": "Tokyo"})]
    with a.messages.stream(**akw) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "get_weather", {"city": "Tokyo"})]

    # asked so, the same model writes its call in a ```json fence: a call too
    ch = o.chat.completions.create(**{**kw, "messages": MSG}).choices[0]
    assert ch.finish_reason == "tool_calls" and not ch.message.content, ch
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls] == \
        [("get_weather", {"city": "Paris"})]

    cl = ollama.Client(host=f"http://127.0.0.1:{coder.port}", headers={"Authorization": f"Bearer {KEY}"})
    r = cl.chat(model="qc", messages=TOKYO, tools=[tool], options={"temperature": 0, "num_predict": 100})
    assert [(c.function.name, c.function.arguments) for c in r.message.tool_calls or []] == [("get_weather", {"city": "Tokyo"})]
    assert not r.message.content
