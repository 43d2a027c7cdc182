"""The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the official
`anthropic` client against a real `saragossa serve` (the agent test model: a tiny fixture with
Qwen3's real template), and a Claude Code request written from the public API documentation."""
import json
import re

import anthropic
import httpx
import jsonschema
import pytest

from agent_util import srv, ac  # noqa: F401 (fixtures)
from server_util import KEY


MSG = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
NO_THINK = {"thinking": {"type": "disabled"}}
# temperature goes through extra_body: newer clients dropped it from the signature
T0 = {**NO_THINK, "temperature": 0}

# message_start ping (content_block_start content_block_delta* content_block_stop)* message_delta message_stop
SEQUENCE = re.compile(r"message_start ping( content_block_start( content_block_delta)* content_block_stop)* "
                      r"message_delta message_stop")


def sse_events(text):
    out = []
    for block in text.split("\n\n"):
        lines = block.strip().split("\n")
        if len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "):
            data = json.loads(lines[1][6:])
            assert data["type"] == lines[0][7:]
            out.append(data)
    return out


def test_message_reports_max_tokens_and_usage(ac):
    r = ac.messages.create(model="q3", max_tokens=8, messages=MSG, extra_body=T0)
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.stop_reason == "max_tokens" and r.stop_sequence is None
    assert [b.type for b in r.content] == ["text"]
    assert r.usage.output_tokens == 8
    assert r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) > 5
    # a Claude model name the server does not have means the served model
    r2 = ac.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MSG, extra_body=T0)
    assert r2.content[0].text == r.content[0].text and r2.model == "claude-sonnet-4-5"


def test_stop_sequence_is_reported(ac):
    r = ac.messages.create(model="q3", max_tokens=40, messages=MSG, extra_body=T0)
    text = r.content[0].text
    stop = text[5:8]
    r2 = ac.messages.create(model="q3", max_tokens=40, messages=MSG, stop_sequences=[stop],
                            extra_body=T0)
    assert r2.stop_reason == "stop_sequence" and r2.stop_sequence == stop
    assert r2.content[0].text == text[:text.index(stop)]


def test_stream_event_sequence_and_text_equal_the_non_streamed_answer(ac, srv):
    whole = ac.messages.create(model="q3", max_tokens=12, messages=MSG, extra_body=T0)
    with srv.client() as c:
        r = c.post("/v1/messages", json={"model": "q3", "max_tokens": 12, "messages": MSG, "temperature": 0,
                                         "stream": True, **NO_THINK}, headers={"x-api-key": KEY})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    ev = sse_events(r.text)
    assert SEQUENCE.fullmatch(" ".join(e["type"] for e in ev)), [e["type"] for e in ev]
    assert ev[0]["message"]["content"] == [] and ev[0]["message"]["usage"]["input_tokens"] > 0
    text = "".join(e["delta"]["text"] for e in ev if e["type"] == "content_block_delta")
    assert text == whole.content[0].text
    assert ev[-2]["delta"]["stop_reason"] == "max_tokens" and ev[-2]["usage"]["output_tokens"] == 12
    # the client's own stream accumulator agrees
    with ac.messages.stream(model="q3", max_tokens=12, messages=MSG, extra_body=T0) as s:
        final = s.get_final_message()
    assert final.content[0].text == whole.content[0].text


def test_tool_use_round_trip(ac):
    r = ac.messages.create(model="q3", max_tokens=160, messages=MSG, tools=TOOLS,
                           tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                           extra_body=T0)
    assert r.stop_reason == "tool_use"
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_")
    jsonschema.validate(uses[0].input, WEATHER)
    # the client runs the tool and sends the result back; the model answers
    follow = MSG + [{"role": "assistant", "content": r.content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                  "content": [{"type": "text", "text": "21 C, sunny"}]}]}]
    r2 = ac.messages.create(model="q3", max_tokens=8, messages=follow, tools=TOOLS,
                            tool_choice={"type": "none"}, extra_body=T0)
    assert r2.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in r2.content] == ["text"]
    assert r2.usage.input_tokens + (r2.usage.cache_read_input_tokens or 0) > \
        r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
    # streamed: input_json_delta pieces rebuild the same input
    with ac.messages.stream(model="q3", max_tokens=160, messages=MSG, tools=TOOLS,
                            tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=T0) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.input for b in final.content if b.type == "tool_use"] == [uses[0].input]


def test_auto_tool_choice_answers_well_formed_blocks(ac):
    for seed_temp in (0.0, 1.0):
        r = ac.messages.create(model="q3", max_tokens=24, messages=MSG, tools=TOOLS,
                               extra_body={**NO_THINK, "temperature": seed_temp})
        for b in r.content:
            assert b.type in ("text", "tool_use")
            if b.type == "tool_use":
                assert isinstance(b.input, dict)
        assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_count_tokens_matches_the_prompt_of_a_message(ac):
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    n = ac.messages.count_tokens(model="q3", messages=MSG, system=system, tools=TOOLS).input_tokens
    r = ac.messages.create(model="q3", max_tokens=1, messages=MSG, system=system, tools=TOOLS, extra_body=NO_THINK)
    assert n > 0
    # thinking disabled adds the empty <think></think> block to the prompt
    n_nothink = ac.messages.count_tokens(model="q3", messages=MSG, system=system, tools=TOOLS,
                                         extra_body=NO_THINK).input_tokens
    assert r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == n_nothink
    assert n_nothink > n


def test_error_envelopes(srv, ac):
    bad_key = anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model="q3", max_tokens=4, messages=MSG)
    assert e.value.status_code == 401 and e.value.body["error"]["type"] == "authentication_error"
    assert e.value.body["type"] == "error"
    # bearer auth works as well as x-api-key
    bearer = anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", auth_token=KEY, max_retries=0)
    assert bearer.messages.create(model="q3", max_tokens=2, messages=MSG).stop_reason == "max_tokens"
    with pytest.raises(anthropic.NotFoundError) as e:
        ac.messages.create(model="nope", max_tokens=4, messages=MSG)
    assert e.value.body["error"]["type"] == "not_found_error" and "nope" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model="q3", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "text-only" in e.value.body["error"]["message"]
    with srv.client() as c:
        r = c.post("/v1/messages", json={"model": "q3", "messages": MSG}, headers={"x-api-key": KEY})
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
        assert r.json()["type"] == "error"
        r = c.post("/v1/messages", content=b"{", headers={"x-api-key": KEY})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model="q3", max_tokens=4, messages=MSG, tools=TOOLS,
                           tool_choice={"type": "tool", "name": "missing"})
    assert "missing" in e.value.body["error"]["message"]


# A request as Claude Code sends it (shape from the public Messages API documentation and Claude
# Code's documented gateway requirements): its headers, the beta query flag, system prompt blocks with
# cache_control, content blocks with cache_control, tools with draft-07 JSON Schemas, metadata.user_id,
# a large max_tokens (capped by the server), streaming.
CLAUDE_CODE_HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
    "anthropic-dangerous-direct-browser-access": "true",
    "x-app": "cli",
    "user-agent": "claude-cli/2.0.14 (external, cli)",
    "x-stainless-lang": "js",
    "x-stainless-package-version": "0.60.0",
    "x-stainless-retry-count": "0",
    "x-stainless-timeout": "600",
    "content-type": "application/json",
    "accept": "application/json",
}
CLAUDE_CODE_BODY = {
    "model": "claude-sonnet-4-5-20250929",
    "max_tokens": 32000,
    "temperature": 1,
    "stream": True,
    "metadata": {"user_id": "user_0123abcd_account__session_4567-89ef"},
    "system": [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering tasks.",
         "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nThis is a reminder.\n</system-reminder>"},
        {"type": "text", "text": "list the files", "cache_control": {"type": "ephemeral"}}]}],
    "tools": [
        {"name": "Bash", "description": "Executes a bash command",
         "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                          "properties": {"command": {"type": "string", "description": "The command"},
                                         "timeout": {"type": "number", "description": "ms"}},
                          "required": ["command"], "additionalProperties": False}},
        {"name": "Read", "description": "Reads a file",
         "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                          "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"},
                                         "limit": {"type": "number"}},
                          "required": ["file_path"], "additionalProperties": False}},
    ],
}


def test_recorded_claude_code_request_is_served(srv):
    with srv.client(auth=False) as c:
        h = dict(CLAUDE_CODE_HEADERS, **{"x-api-key": KEY})
        body = dict(CLAUDE_CODE_BODY, max_tokens=32000)
        # the real run would generate up to the cap; keep the test short with a stop at the cap
        r = c.post("/v1/messages?beta=true", json=dict(body, max_tokens=12), headers=h)
        assert r.status_code == 200, r.text
        ev = sse_events(r.text)
        assert SEQUENCE.fullmatch(" ".join(e["type"] for e in ev)), [e["type"] for e in ev]
        assert ev[0]["message"]["model"] == "claude-sonnet-4-5-20250929"
        # Claude Code's quick non-streamed probe on its small model
        probe = dict(body, model="claude-3-5-haiku-20241022", max_tokens=1, stream=False, tools=[])
        r = c.post("/v1/messages?beta=true", json=probe, headers=h)
        assert r.status_code == 200 and r.json()["stop_reason"] == "max_tokens"
        # and its token counting
        r = c.post("/v1/messages/count_tokens?beta=true", headers=h,
                   json={k: body[k] for k in ("model", "messages", "system", "tools")})
        assert r.status_code == 200 and r.json()["input_tokens"] > 50
