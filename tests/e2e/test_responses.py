"""OpenAI's Responses API (/v1/responses) through the official `openai` client against a real
`saragossa serve`: the tiny agent test model (Qwen3's template, a vocabulary with <think> and
<tool_call>), whose words are noise, so what is checked is what the server guarantees: the
answer is the one Chat Completions gives for the same conversation and seed, output items and
typed SSE events in OpenAI's order and shapes, forced calls valid for their schema, outputs valid
for their JSON Schema, stored responses continued by previous_response_id (with the prefix cache
reusing the conversation), and the store's GET / DELETE / LRU bound. Codex CLI cannot be installed
here (its npm registry is out of reach), so the request shape it sends is replayed instead."""
import json
import re
import socket
import time

import httpx
import jsonschema
import openai
import pydantic
import pytest

from agent_util import make_qwen3_agent_model, think_token_id
from server_util import KEY, Server, free_port

STORE_MAX = 4
BLOCK = 16
NO_THINK = {"effort": "none"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER,
          "strict": True}]
LONG = ("Please read this note about the weather in Paris, Lyon and Marseille carefully before you answer, "
        "because the details matter for the plan we are making for the whole week ahead of us. ") * 3


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("responses")
    model = make_qwen3_agent_model(d / "q3")
    # small prefix-cache blocks so a short conversation fills some; a small store to see it evict
    s = Server("--model", f"q3={model}", "--ctx", "2048", socket_path=str(d / "s.sock"), port=free_port(), key=KEY,
               env={"RETI_SERVE_PREFIX_BLOCK_TOKENS": str(BLOCK), "SARAGOSSA_SERVE_RESPONSES_MAX": str(STORE_MAX),
                    "SARAGOSSA_LOG": "info"})
    yield s
    s.stop()


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


def test_plain_create_is_the_chat_answer_in_responses_shape(oai):
    r = oai.responses.create(model="q3", instructions="Be brief.", input="Hello there", max_output_tokens=12,
                             reasoning=NO_THINK, temperature=0.7, extra_body={"seed": 5}, metadata={"k": "v"})
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "q3"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.metadata == {"k": "v"} and r.instructions == "Be brief." and r.max_output_tokens == 12
    assert r.temperature == 0.7 and r.tools == [] and r.tool_choice == "auto" and r.store is not False
    [msg] = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text" and msg.content[0].annotations == []
    u = r.usage
    assert u.output_tokens == 12 and u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    # the same conversation and seed on Chat Completions: the same tokens
    c = oai.chat.completions.create(model="q3", messages=[{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "Hello there"}],
                                    max_completion_tokens=12, temperature=0.7, seed=5, reasoning_effort="none")
    assert c.choices[0].message.content == r.output_text
    assert c.usage.prompt_tokens == u.input_tokens


def test_input_items_are_the_string_input(oai):
    a = oai.responses.create(model="q3", input="Hi", max_output_tokens=6, reasoning=NO_THINK, extra_body={"seed": 1})
    b = oai.responses.create(model="q3", input=[{"type": "message", "role": "user",
                                                 "content": [{"type": "input_text", "text": "Hi"}]}],
                             max_output_tokens=6, reasoning=NO_THINK, extra_body={"seed": 1})
    c = oai.responses.create(model="q3", input=[{"role": "user", "content": "Hi"}], max_output_tokens=6,
                             reasoning=NO_THINK, extra_body={"seed": 1})
    assert a.output_text == b.output_text == c.output_text
    assert a.usage.input_tokens == b.usage.input_tokens == c.usage.input_tokens


def events_of(stream):
    evs = list(stream)
    assert [e.sequence_number for e in evs] == list(range(len(evs)))
    assert evs[0].type == "response.created" and evs[1].type == "response.in_progress"
    assert evs[0].response.status == "in_progress" and evs[0].response.output == []
    assert evs[-1].type in ("response.completed", "response.incomplete")
    return evs


def check_item_events(evs):
    """Every item is announced, filled and closed in order; the final response holds what was
    streamed."""
    final = evs[-1].response
    open_items = {}
    for e in evs[2:-1]:
        if e.type == "response.output_item.added":
            assert e.output_index not in open_items and e.item.status == "in_progress"
            open_items[e.output_index] = {"item": e.item, "text": "", "parts": 0, "args": ""}
        elif e.type == "response.content_part.added":
            st = open_items[e.output_index]
            assert e.item_id == st["item"].id and e.content_index == 0 and e.part.text == ""
            st["parts"] += 1
        elif e.type in ("response.output_text.delta", "response.reasoning_text.delta"):
            st = open_items[e.output_index]
            assert st["parts"] == 1 and e.item_id == st["item"].id
            st["text"] += e.delta
        elif e.type in ("response.output_text.done", "response.reasoning_text.done"):
            assert e.text == open_items[e.output_index]["text"]
        elif e.type == "response.content_part.done":
            assert e.part.text == open_items[e.output_index]["text"]
        elif e.type == "response.function_call_arguments.delta":
            open_items[e.output_index]["args"] += e.delta
        elif e.type == "response.function_call_arguments.done":
            assert e.arguments == open_items[e.output_index]["args"]
        elif e.type == "response.output_item.done":
            st = open_items.pop(e.output_index)
            assert e.item.id == st["item"].id
            assert e.item == final.output[e.output_index]
            if e.item.type == "message":
                assert e.item.content[0].text == st["text"]
            elif e.item.type == "reasoning":
                assert e.item.content[0].text == st["text"]
            else:
                assert e.item.arguments == st["args"]
        else:
            raise AssertionError(f"unexpected event {e.type}")
    assert not open_items, "every item added is done"
    return final


def test_streamed_events_in_order_and_deltas_make_the_answer(oai):
    evs = events_of(oai.responses.create(model="q3", input="Hello", max_output_tokens=16, stream=True,
                                         reasoning=NO_THINK, extra_body={"seed": 2}))
    final = check_item_events(evs)
    deltas = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
    assert deltas and deltas == final.output_text
    types = [e.type for e in evs]
    assert types[2:5] == ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    # the stream and a whole answer agree
    whole = oai.responses.create(model="q3", input="Hello", max_output_tokens=16, reasoning=NO_THINK,
                                 extra_body={"seed": 2})
    assert whole.output_text == deltas and whole.usage.output_tokens == final.usage.output_tokens


def test_reasoning_comes_as_a_reasoning_item(oai, srv):
    bias = {str(think_token_id(srv)): 50}
    r = oai.responses.create(model="q3", input="Think first", max_output_tokens=80, reasoning={"effort": "low"},
                             extra_body={"seed": 3, "logit_bias": bias})
    kinds = [o.type for o in r.output]
    assert kinds[0] == "reasoning", kinds
    rs = r.output[0]
    assert rs.id.startswith("rs_") and rs.summary == [] and rs.content[0].type == "reasoning_text"
    assert rs.content[0].text and "</think>" not in rs.content[0].text
    assert 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
    evs = events_of(oai.responses.create(model="q3", input="Think first", max_output_tokens=80,
                                         reasoning={"effort": "low"}, stream=True,
                                         extra_body={"seed": 3, "logit_bias": bias}))
    final = check_item_events(evs)
    assert [o.type for o in final.output] == kinds
    assert "".join(e.delta for e in evs if e.type == "response.reasoning_text.delta") == rs.content[0].text


def test_logprobs_when_included_are_the_chat_ones(oai):
    kw = dict(model="q3", input="Hello", max_output_tokens=6, reasoning=NO_THINK, top_logprobs=3,
              include=["message.output_text.logprobs"], extra_body={"seed": 4})
    r = oai.responses.create(**kw)
    part = r.output[0].content[0]
    assert len(part.logprobs) == r.usage.output_tokens == 6
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in part.logprobs)
    # the tokens' bytes make the text (bytes that are no character are U+FFFD there, or dropped at the end)
    made = bytes(b for e in part.logprobs for b in e.bytes).decode("utf-8", "replace")
    assert made.replace("\ufffd", "") == part.text.replace("\ufffd", "")
    c = oai.chat.completions.create(model="q3", messages=[{"role": "user", "content": "Hello"}], max_completion_tokens=6,
                                    reasoning_effort="none", seed=4, logprobs=True, top_logprobs=3)
    def key(es):
        return [(e.token, round(e.logprob, 4), [t.token for t in e.top_logprobs]) for e in es]
    assert key(part.logprobs) == key(c.choices[0].logprobs.content)
    evs = events_of(oai.responses.create(stream=True, **kw))
    streamed = [e for ev in evs if ev.type == "response.output_text.delta" for e in ev.logprobs]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in part.logprobs]
    assert key(evs[-1].response.output[0].content[0].logprobs) == key(part.logprobs)
    # not asked for: none
    plain = oai.responses.create(model="q3", input="Hello", max_output_tokens=3, reasoning=NO_THINK)
    assert plain.output[0].content[0].logprobs == []


def check_call(item):
    assert item.type == "function_call" and item.name == "get_weather" and item.status == "completed"
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    jsonschema.validate(json.loads(item.arguments), WEATHER)


def test_tool_round_trip_stored_and_stateless_agree(oai):
    r = oai.responses.create(model="q3", input="What is the weather in Paris?", tools=TOOLS, tool_choice="required",
                             parallel_tool_calls=False, max_output_tokens=150, reasoning=NO_THINK,
                             extra_body={"seed": 0})
    assert r.status == "completed", r
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    check_call(calls[0])
    assert r.tools[0].name == "get_weather" and r.tool_choice == "required"
    out = {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp": 21}'}
    # continued from the store
    r2 = oai.responses.create(model="q3", previous_response_id=r.id, input=[out], tools=TOOLS, max_output_tokens=8,
                              reasoning=NO_THINK, extra_body={"seed": 1})
    assert r2.previous_response_id == r.id and r2.output[-1].type in ("message", "function_call")
    # the same conversation sent whole (store false): the same prompt, the same answer
    history = [{"type": "message", "role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                "arguments": calls[0].arguments}, out]
    r3 = oai.responses.create(model="q3", input=history, tools=TOOLS, max_output_tokens=8, reasoning=NO_THINK,
                              store=False, extra_body={"seed": 1})
    assert r3.usage.input_tokens == r2.usage.input_tokens
    assert r3.output_text == r2.output_text
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r3.id)  # store false: not kept


def test_streamed_call_events(oai):
    evs = events_of(oai.responses.create(model="q3", input="Weather in Lyon?", tools=TOOLS,
                                         tool_choice={"type": "function", "name": "get_weather"},
                                         parallel_tool_calls=False, max_output_tokens=150, reasoning=NO_THINK,
                                         stream=True, extra_body={"seed": 4}))
    final = check_item_events(evs)
    assert evs[-1].type == "response.completed"
    calls = [o for o in final.output if o.type == "function_call"]
    assert len(calls) == 1
    check_call(calls[0])
    assert any(e.type == "response.function_call_arguments.delta" for e in evs)


def test_structured_output_json_schema_validates(oai):
    for seed in range(3):
        r = oai.responses.create(model="q3", input="Weather as JSON", max_output_tokens=200, reasoning=NO_THINK,
                                 text={"format": {"type": "json_schema", "name": "weather", "schema": WEATHER,
                                                  "strict": True}}, extra_body={"seed": seed})
        assert r.status == "completed"
        jsonschema.validate(json.loads(r.output_text), WEATHER)
        assert r.text.format.type == "json_schema"
    r = oai.responses.create(model="q3", input="Any JSON", max_output_tokens=200, reasoning=NO_THINK,
                             text={"format": {"type": "json_object"}}, extra_body={"seed": 1})
    if r.status == "completed":
        json.loads(r.output_text)


class City(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=10)
    sunny: bool


def test_parse_with_a_pydantic_model(oai):
    r = oai.responses.parse(model="q3", input="A city", text_format=City, max_output_tokens=200, reasoning=NO_THINK,
                            extra_body={"seed": 7})
    assert isinstance(r.output_parsed, City)


def test_previous_response_id_continues_and_reuses_the_cache(oai):
    r1 = oai.responses.create(model="q3", input=LONG, max_output_tokens=6, reasoning=NO_THINK,
                              prompt_cache_key="conv-1", extra_body={"seed": 1})
    assert r1.usage.input_tokens > 3 * BLOCK
    # another session runs between: the live state no longer holds the conversation
    oai.responses.create(model="q3", input="Something else entirely", max_output_tokens=4, reasoning=NO_THINK,
                         prompt_cache_key="other", store=False)
    r2 = oai.responses.create(model="q3", previous_response_id=r1.id, input="And in Lyon?", max_output_tokens=6,
                              reasoning=NO_THINK, extra_body={"seed": 2})
    # the conversation came from the store: the prompt is the one sent whole ...
    whole = [{"role": "user", "content": LONG}, {"role": "assistant", "content": r1.output_text},
             {"role": "user", "content": "And in Lyon?"}]
    r3 = oai.responses.create(model="q3", input=whole, max_output_tokens=6, reasoning=NO_THINK, store=False,
                              prompt_cache_key="conv-1", extra_body={"seed": 2})
    assert r2.usage.input_tokens == r3.usage.input_tokens
    assert r2.output_text == r3.output_text
    # ... and its session key came with it: the cache blocks of the first turn were reused
    assert r2.usage.input_tokens_details.cached_tokens >= (r1.usage.input_tokens // BLOCK) * BLOCK - BLOCK
    assert r2.usage.input_tokens_details.cached_tokens >= 2 * BLOCK


def test_get_input_items_and_delete(oai, srv):
    r = oai.responses.create(model="q3", input="Remember me", max_output_tokens=4, reasoning=NO_THINK)
    got = oai.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage
    items = list(oai.responses.input_items.list(r.id))
    assert len(items) == 1 and items[0].role == "user" and items[0].content[0].text == "Remember me"
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.retrieve(r.id)
    assert e.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model="q3", input="x", previous_response_id=r.id, max_output_tokens=2)
    assert e.value.body["param"] == "previous_response_id"
    with srv.client() as c:
        assert c.delete(f"/v1/responses/{r.id}").status_code == 404
        assert c.get(f"/v1/responses/{r.id}/nope").status_code == 404
        assert c.put(f"/v1/responses/{r.id}").status_code == 405
        assert c.get("/health").status_code == 200


def test_the_store_is_bounded_and_evicts_the_least_recently_used(oai):
    ids = [oai.responses.create(model="q3", input=f"n{i}", max_output_tokens=1, reasoning=NO_THINK).id
           for i in range(STORE_MAX)]
    oai.responses.retrieve(ids[0])  # touched: now the most recent
    extra = oai.responses.create(model="q3", input="one more", max_output_tokens=1, reasoning=NO_THINK).id
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(ids[1])  # the least recently used went
    for i in [ids[0], *ids[2:], extra]:
        assert oai.responses.retrieve(i).id == i


# ---- the shape Codex CLI sends (codex-rs ResponsesApiRequest), replayed over raw HTTP ----

SHELL = {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
         "strict": False, "parameters": {"type": "object", "properties": {
             "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
             "workdir": {"type": "string", "description": "The working directory"},
             "timeout_ms": {"type": "number", "description": "The timeout for the command in milliseconds"}},
             "required": ["command"], "additionalProperties": False}}


def codex_body(inp, **kw):
    return {"model": "q3", "instructions": "You are a coding agent running in a terminal.", "input": inp,
            "tools": [SHELL, {"type": "web_search"}], "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "3f0c2a9e-codex-session",
            "text": {"verbosity": "medium"}, **kw}


def sse(srv, body):
    events = []
    with srv.client() as c, c.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                d = json.loads(line[6:])
                assert d["type"] == name
                events.append(d)
    return events


def test_codex_request_shape(srv):
    user = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>ro"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}]
    ev = sse(srv, codex_body(user, max_output_tokens=40, seed=1))
    assert [e["sequence_number"] for e in ev] == list(range(len(ev)))
    assert ev[0]["type"] == "response.created" and ev[-1]["type"] in ("response.completed", "response.incomplete")
    final = ev[-1]["response"]
    assert final["store"] is False and [t["name"] for t in final["tools"]] == ["shell"]
    done = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
    assert done == final["output"]
    # the next turn as Codex sends it: the whole history, with a reasoning item (encrypted content
    # this server never made), a shell call and its output
    turn2 = user + [
        {"type": "reasoning", "id": "rs_x", "summary": [{"type": "summary_text", "text": "Listing."}],
         "encrypted_content": "gAAAA-opaque"},
        {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["ls"]}), "call_id": "call_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nsrc\n"}]
    ev2 = sse(srv, codex_body(turn2, max_output_tokens=8, seed=2))
    assert ev2[-1]["type"] in ("response.completed", "response.incomplete")
    assert ev2[-1]["response"]["usage"]["input_tokens"] > final["usage"]["input_tokens"]
    with srv.client() as c:
        assert c.get(f"/v1/responses/{final['id']}").status_code == 404  # store false


def test_bad_requests_name_the_field(oai, srv):
    cases = [
        ({"input": 7}, "input", "'input' must be a string or an array of input items, got integer"),
        ({"input": []}, "input", "'input' must not be empty"),
        ({"input": [{"type": "image_generation_call"}]}, "input[0].type", None),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0].type", None),
        ({"input": [{"type": "function_call", "name": "f", "call_id": "c", "arguments": {}}]}, "input[0].arguments",
         None),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", None),
        ({"tools": [{"type": "function"}]}, "tools[0].name", None),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice.type", None),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type", None),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", None),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", None),
        ({"max_output_tokens": 0}, "max_output_tokens", None),
        ({"metadata": {"k": 1}}, "metadata", None),
        ({"store": "yes"}, "store", "'store' must be a boolean, got string"),
        ({"previous_response_id": 5}, "previous_response_id", None),
        ({"background": True}, "background", None),
        ({"temperature": 9}, "temperature", None),
    ]
    with srv.client() as c:
        for extra, param, msg in cases:
            r = c.post("/v1/responses", json={"model": "q3", "input": "hi", **extra})
            assert r.status_code == 400, (extra, r.text)
            err = r.json()["error"]
            assert err["param"] == param and err["type"] == "invalid_request_error", (extra, err)
            if msg:
                assert err["message"] == msg
        r = c.post("/v1/responses", json={"model": "nope", "input": "hi"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = c.post("/v1/responses", json={"model": "q3", "input": "hi", "previous_response_id": "resp_nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "previous_response_not_found"
        assert c.get("/health").status_code == 200


def test_a_client_gone_mid_stream_stops_the_generation(srv):
    limit = 1900
    # the end tokens are forbidden, so the answer would run to the limit: only the client's leaving stops it
    with srv.client() as h:
        ends = [h.post("/tokenize", json={"model": "q3", "prompt": t, "add_special": False}).json()["tokens"][0]
                for t in ("<|im_end|>", "<|endoftext|>")]
    body = json.dumps({"model": "q3", "input": "Tell me a very long story", "max_output_tokens": limit, "stream": True,
                       "reasoning": {"effort": "none"}, "seed": 11, "temperature": 1.5,
                       "logit_bias": {str(e): -100 for e in ends}}).encode()
    c = socket.socket(socket.AF_UNIX)
    c.connect(srv.socket)
    c.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: sg\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b"response.output_text.delta" not in got:
        chunk = c.recv(4096)
        assert chunk, got
        got += chunk
    rid = re.search(rb'"id":"(resp_[0-9a-f]+)"', got).group(1).decode()
    c.close()
    with srv.client() as h:
        for _ in range(200):
            if not h.get("/health").json()["busy"]:
                break
            time.sleep(0.05)
        assert not h.get("/health").json()["busy"]
        assert h.get(f"/v1/responses/{rid}").status_code == 404  # a cancelled response is not stored
    m = re.search(rf"{rid} cancelled after (\d+) tokens", srv.stderr())
    assert m, srv.stderr()[-2000:]
    assert int(m.group(1)) < limit
    print("tokens before the stop:", m.group(1))
