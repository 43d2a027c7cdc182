"""Tool calls, structured output and reasoning through the official `openai` (and `ollama`) clients
against a real `saragossa serve`: a tiny fixture model with Qwen3's real chat template and a
vocabulary holding <think>, </think>, <tool_call>, </tool_call>. The model is random, so what it
says is noise: what is checked is what the server guarantees whatever the model says (forced calls
to the right function with arguments valid for their schema, outputs valid for their JSON Schema,
reasoning kept out of the answer, unfinished JSON reported as an error)."""
import json

import httpx
import jsonschema
import ollama
import openai
import pytest

from agent_util import think_token_id, srv, oai  # noqa: F401 (fixtures)
from server_util import KEY


MSG = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 6},
                                         "hour24": {"type": "boolean"}}, "required": ["tz"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}}]
NO_THINK = {"enable_thinking": False}


def check_calls(msg, allowed):
    assert msg.tool_calls, msg
    for c in msg.tool_calls:
        assert c.type == "function" and c.id
        assert c.function.name in allowed
        schema = WEATHER if c.function.name == "get_weather" else TIME
        jsonschema.validate(json.loads(c.function.arguments), schema)


def test_tool_choice_required_forces_a_valid_call(oai):
    for seed in range(3):
        r = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, tool_choice="required", max_tokens=160,
                                        seed=seed, parallel_tool_calls=False, extra_body=NO_THINK)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls"
        check_calls(ch.message, {"get_weather", "get_time"})
        assert len(ch.message.tool_calls) == 1
        assert not ch.message.content


def test_parallel_calls_cut_by_max_tokens_keep_the_finished_ones(oai):
    for seed in range(3):
        r = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, tool_choice="required", max_tokens=120,
                                        seed=seed, extra_body=NO_THINK)
        ch = r.choices[0]
        check_calls(ch.message, {"get_weather", "get_time"})
        # a call cut short is reported as the truncation it is (finish "length"), never as a
        # broken tool call nor as text
        assert not ch.message.content
        assert ch.finish_reason in ("tool_calls", "length")
        assert ch.finish_reason == "tool_calls" or r.usage.completion_tokens == 120


def test_tool_choice_named_calls_that_function_only(oai):
    for seed in range(3):
        r = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, max_tokens=160, seed=seed,
                                        tool_choice={"type": "function", "function": {"name": "get_time"}},
                                        parallel_tool_calls=False, extra_body=NO_THINK)
        check_calls(r.choices[0].message, {"get_time"})
        assert len(r.choices[0].message.tool_calls) == 1


def test_tool_choice_none_and_auto_answer_well_formed(oai):
    r = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, tool_choice="none", max_tokens=24,
                                    temperature=0, extra_body=NO_THINK)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")
    for seed in range(3):
        r = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, max_tokens=24, seed=seed,
                                        extra_body=NO_THINK)
        m = r.choices[0].message
        # whatever the model said: text, or calls whose arguments are JSON objects
        assert isinstance(m.content, str) or m.tool_calls
        for c in m.tool_calls or []:
            assert isinstance(json.loads(c.function.arguments), dict)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_streamed_tool_call_deltas_reassemble_to_the_non_streamed_call(oai):
    kw = dict(model="q3", messages=MSG, tools=TOOLS, tool_choice="required", max_tokens=160, temperature=0,
              extra_body=NO_THINK)
    whole = oai.chat.completions.create(**kw).choices[0].message
    calls = {}
    finish = None
    n_arg_deltas = 0
    for chunk in oai.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
                n_arg_deltas += 1
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert n_arg_deltas > 1, "the arguments stream in pieces"
    got = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    assert got == [(c.function.name, json.loads(c.function.arguments)) for c in whole.tool_calls]


def test_tool_results_go_back_through_the_template(oai, srv):
    msgs = MSG + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees and sunny"}]
    r = oai.chat.completions.create(model="q3", messages=msgs, tools=TOOLS, max_tokens=4, temperature=0,
                                    extra_body=NO_THINK)
    # the rendered prompt holds the call (arguments as an object) and the result
    one_turn = oai.chat.completions.create(model="q3", messages=MSG, tools=TOOLS, max_tokens=1, temperature=0,
                                           extra_body=NO_THINK)
    assert r.usage.prompt_tokens > one_turn.usage.prompt_tokens + 20
    with srv.client() as c:
        bad = c.post("/v1/chat/completions", json={"model": "q3", "messages": MSG, "tools": TOOLS,
                                                   "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert bad.status_code == 400 and "nope" in bad.json()["error"]["message"]


# Bounded schemas (every string has a maxLength, every array a maxItems): any output the grammar
# allows finishes within max_tokens.
S = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"name": S}, "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "object", "properties": {"v": {"const": {"a": [1, 2]}}}, "required": ["v"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}},
     "required": ["tags"]},
    {"type": "object", "properties": {"p": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -5,
                                                                                    "maximum": 5}, "s": S},
                                            "required": ["x", "s"], "additionalProperties": False}},
     "required": ["p"]},
    {"type": "object", "properties": {"v": {"anyOf": [S, {"type": "integer", "minimum": 0, "maximum": 9}]}},
     "required": ["v"]},
    {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "integer", "minimum": 1,
                                                                          "maximum": 9}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer", "minimum": 1,
                                                                             "maximum": 9}},
         "required": ["kind", "side"], "additionalProperties": False}]}}, "required": ["shape"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}},
                      "required": ["x"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"f": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["f"]},
    {"type": "object", "properties": {"n": {"type": "null"}}, "required": ["n"]},
    {"type": "object", "properties": {"s": {"type": ["string", "null"], "maxLength": 5}}, "required": ["s"]},
    {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                                             "minItems": 1, "maxItems": 2}}, "required": ["xs"]},
    {"type": "object", "properties": {"a": S, "b": {"type": "boolean"}}, "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "minLength": 2, "maxLength": 4}}, "required": ["code"]},
    {"type": "object", "properties": {"a": S, "b": {"type": "integer", "minimum": 0, "maximum": 3}, "c": {"enum": [1, 2]}},
     "required": ["a", "b", "c"], "additionalProperties": False},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    {"type": "object", "properties": {"m": {"enum": [1, "a", None, True]}}, "required": ["m"]},
    {"type": "object", "properties": {"grid": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}, "required": ["grid"]},
    {"type": "object", "properties": {"k": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}},
     "required": ["k"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1,
                                                                                      "maximum": 1000},
                                                                               "roles": {"type": "array", "maxItems": 2,
                                                                                         "items": {"enum": ["admin", "dev"]}}},
                                               "required": ["id", "roles"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
]


def rf(schema):
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_schema_output_validates(oai, i):
    r = oai.chat.completions.create(model="q3", messages=MSG, response_format=rf(SCHEMAS[i]), max_tokens=300,
                                    seed=i, extra_body=NO_THINK)
    out = r.choices[0].message.content
    jsonschema.validate(json.loads(out), SCHEMAS[i])
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("i", range(0, len(SCHEMAS), 3))
def test_json_schema_output_validates_with_thinking(oai, srv, i):
    # A bias on <think> makes the random model open its reasoning; the reasoning budget (half of
    # max_tokens) then closes it, and the answer after it is constrained.
    r = oai.chat.completions.create(model="q3", messages=MSG, response_format=rf(SCHEMAS[i]), max_tokens=240,
                                    seed=i, logit_bias={str(think_token_id(srv)): 50},
                                    extra_body={"enable_thinking": True})
    m = r.choices[0].message
    assert m.model_extra.get("reasoning_content"), "the reasoning is reported apart"
    assert "</think>" not in m.model_extra["reasoning_content"] and "think>" not in m.content[:10]
    jsonschema.validate(json.loads(m.content), SCHEMAS[i])


def test_streamed_schema_output_is_a_valid_prefix_at_every_delta_and_validates(oai):
    schema = SCHEMAS[16]
    text = ""
    for chunk in oai.chat.completions.create(model="q3", messages=MSG, response_format=rf(schema), max_tokens=300,
                                             seed=3, stream=True, extra_body=NO_THINK):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    jsonschema.validate(json.loads(text), schema)


def test_unsupported_schema_keyword_is_400_naming_it(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="q3", messages=MSG, max_tokens=8,
                                    response_format=rf({"type": "object", "properties": {
                                        "code": {"type": "string", "pattern": "^[A-Z]+$"}}}))
    assert "pattern" in str(e.value) and "/properties/code" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="q3", messages=MSG, max_tokens=8, tool_choice="required", tools=[
            {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}])
    assert "multipleOf" in str(e.value) and "'f'" in str(e.value)


def test_unfinished_json_is_an_error_in_both_modes(oai, srv):
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 30, "maxLength": 40}},
              "required": ["s"]}
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="q3", messages=MSG, response_format=rf(schema), max_tokens=3, seed=1,
                                    extra_body=NO_THINK)
    assert e.value.body["code"] == "incomplete_json"
    # SSE: the deltas are a valid prefix, then an error event instead of [DONE]
    body = {"model": "q3", "messages": MSG, "response_format": rf(schema), "max_tokens": 6, "seed": 1, "stream": True,
            "enable_thinking": False}
    with srv.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: {")]
    assert "data: [DONE]" not in r.text
    assert events[-1]["error"]["type"] == "incomplete_json"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e.get("choices"))
    assert text.strip() == "" or text.lstrip().startswith("{")


def test_ollama_format_schema_think_and_tools(srv):
    cl = ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})
    schema = SCHEMAS[3]
    r = cl.chat(model="q3", messages=MSG, format=schema, think=False, options={"num_predict": 200, "seed": 2})
    jsonschema.validate(json.loads(r.message.content), schema)
    # tools: the model's calls (if any) come back as Ollama tool_calls with object arguments
    r = cl.chat(model="q3", messages=MSG, tools=TOOLS, think=False, options={"num_predict": 16, "seed": 0})
    for c in r.message.tool_calls or []:
        assert isinstance(c.function.arguments, dict)
    assert r.message.thinking is None


# ---- the real Gemma 3 270M: json_object on a model that writes sensible JSON ----

@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    import subprocess

    from server_util import ROOT, Server, free_port
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"gemma3-270m not available: {p.stderr[-300:]}")
    sock = str(tmp_path_factory.mktemp("g") / "g.sock")
    s = Server("--model", f"gemma3={p.stdout.split()[-1]}", "--ctx", "1024", socket_path=sock, port=free_port(), key=KEY)
    yield s
    s.stop()


def test_schema_on_gemma3_validates_and_stream_and_ollama_format_agree(gemma):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{gemma.port}/v1", api_key=KEY, max_retries=0)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 24}},
              "required": ["capital"], "additionalProperties": False}
    r = c.chat.completions.create(model="gemma3", messages=msgs, response_format=rf(schema), max_tokens=40,
                                  temperature=0)
    out = json.loads(r.choices[0].message.content)
    jsonschema.validate(out, schema)
    assert out["capital"].strip()
    text = "".join(x.choices[0].delta.content or "" for x in c.chat.completions.create(
        model="gemma3", messages=msgs, response_format=rf(schema), max_tokens=40, temperature=0, stream=True)
        if x.choices)
    assert text == r.choices[0].message.content
    ol = ollama.Client(host=f"http://127.0.0.1:{gemma.port}", headers={"Authorization": f"Bearer {KEY}"})
    g = ol.chat(model="gemma3", messages=msgs, format=schema, options={"temperature": 0, "num_predict": 40,
                                                                       "repeat_penalty": 1.0})
    assert json.loads(g.message.content) == out


def test_json_object_is_one_object_or_an_incomplete_json_error(oai):
    for seed in range(4):
        try:
            r = oai.chat.completions.create(model="q3", messages=MSG, response_format={"type": "json_object"},
                                            max_tokens=60, seed=seed, extra_body=NO_THINK)
        except openai.BadRequestError as e:
            assert e.body["code"] == "incomplete_json"
            continue
        assert isinstance(json.loads(r.choices[0].message.content), dict)
