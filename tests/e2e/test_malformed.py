"""The malformed-request table: every route that reads a body, against a real `saragossa serve` with a
text model (the agent test model "q3"), an embedding model ("emb") and a reranker ("rr"), sent invalid JSON, other JSON types, fields of the wrong type, huge
numbers, deep nesting, unknown fields and bodies over --max-body, each answered with its exact status
and error body in its API's format (OpenAI {"error": {message, type, param, code}}, Anthropic
{"type": "error", "error": {type, message}}, Ollama {"error": message}); then clients that go away
early (mid-headers, mid-body, mid-chunk, before reading the answer, mid-stream). Afterwards the
server still answers, and its memory is flat over a few hundred bad requests.

(Strings with an embedded NUL are tested with the NUL handling, not here.)"""
import json
import socket
import time

import pytest

from agent_util import make_qwen3_agent_model
from server_util import ROOT, Server, make_embed_model

MAX_BODY = 64 * 1024
M = [{"role": "user", "content": "hi"}]

OPENAI = "openai"
ANTHROPIC = "anthropic"
OLLAMA = "ollama"

# route: (its API, a well-formed body that answers at once)
ROUTES = {
    "/v1/chat/completions": (OPENAI, {"model": "q3", "messages": M, "max_tokens": 1}),
    "/v1/completions": (OPENAI, {"model": "q3", "prompt": "hi", "max_tokens": 1}),
    "/tokenize": (OPENAI, {"model": "q3", "prompt": "hi"}),
    "/detokenize": (OPENAI, {"model": "q3", "tokens": [1, 2]}),
    "/v1/embeddings": (OPENAI, {"model": "emb", "input": "hi"}),
    "/v1/rerank": (OPENAI, {"model": "rr", "query": "hi", "documents": ["a", "b"]}),
    "/v1/messages": (ANTHROPIC, {"model": "q3", "messages": M, "max_tokens": 1}),
    "/v1/messages/count_tokens": (ANTHROPIC, {"model": "q3", "messages": M}),
    "/api/chat": (OLLAMA, {"model": "q3", "messages": M, "stream": False, "options": {"num_predict": 1}}),
    "/api/generate": (OLLAMA, {"model": "q3", "prompt": "hi", "stream": False, "options": {"num_predict": 1}}),
    "/api/embed": (OLLAMA, {"model": "emb", "input": "hi"}),
    "/api/embeddings": (OLLAMA, {"model": "emb", "prompt": "hi"}),
    "/api/show": (OLLAMA, {"model": "q3"}),
    "/v1/responses": (OPENAI, {"model": "q3", "input": "hi", "max_output_tokens": 1}),
    "/v1/audio/speech": (OPENAI, {"model": "tts", "input": "hi", "voice": "alloy", "response_format": "pcm"}),
}


def j(o):
    return json.dumps(o).encode()


def nested(depth):
    return b"[" * depth + b"1" + b"]" * depth


def with_field(body, raw_key, raw_value):
    """The JSON object body with one more member written as raw bytes (a number json.dumps cannot
    write, a nesting deeper than Python's encoder goes)."""
    return j(body)[:-1] + b', "' + raw_key.encode() + b'": ' + raw_value + b"}"


def error_body(api, status, message, param=None, code=None, type_=None):
    if api == OLLAMA:
        return {"error": message}
    if api == ANTHROPIC:
        t = {413: "request_too_large", 404: "not_found_error"}.get(status, type_ or "invalid_request_error")
        return {"type": "error", "error": {"type": t, "message": message}}
    return {"error": {"message": message, "type": type_ or ("not_found_error" if status == 404 else "invalid_request_error"),
                      "param": param, "code": code}}


def invalid_json(col, reason):
    return f"request body: invalid JSON at line 1, column {col} (byte {col}): {reason}"


NO_EMBED = "model 'q3' generates text and has no embedding head: serve an embedding model with --embed-model NAME=PATH"
NOT_TEXT = ("model 'emb' is an embedding model (served with --embed-model): it makes embeddings (/v1/embeddings, "
            "/api/embed) or rerank scores (/v1/rerank) and cannot generate text")
MAX_INPUTS = 8
LONG = " ".join(["a"] * 70)  # 72 tokens with [CLS] and [SEP]; the embedding model takes 64
TOO_LONG = "input 0: embed: an input of 72 tokens exceeds the model's limit of 64 (truncate to embed its start)"
AVAILABLE = "q3, emb, rr, tts"

# What every route answers alike: bodies that are not a JSON object, or are one that the JSON
# parser refuses (numbers past int64 / double, nesting past its depth, a duplicate key).
# (label, body, message)
SHARED = [
    ("cut short", b'{"model": "q3", "x": ', invalid_json(21, "unexpected token near end of file")),
    ("trailing garbage", b'{"model": "q3"} x', invalid_json(17, "end of file expected near 'x'")),
    ("duplicate key", b'{"model": "q3", "model": "q3"}', invalid_json(23, "duplicate object key near '\"model\"'")),
    ("an integer past int64", b'{"model": "q3", "x": 123456789012345678901234567890}', invalid_json(51, "too big integer")),
    ("a negative integer past int64", b'{"model": "q3", "x": -123456789012345678901234567890}',
     invalid_json(52, "too big negative integer")),
    ("a real past double", b'{"model": "q3", "x": 1e400}', invalid_json(26, "real number overflow near '1e400'")),
    ("nesting past the parser's depth", b'{"model": "q3", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
     invalid_json(2069, "maximum parsing depth reached near '['")),
    ("invalid UTF-8", b'{"model": "q3", "x": "\xff"}', invalid_json(22, "unable to decode byte 0xff near '\"'")),
    ("a lone surrogate escape", b'{"model": "q3", "x": "\\ud800"}',
     invalid_json(29, "invalid Unicode '\\uD800' near '\"\\ud800\"'")),
    ("not an object", b"[1, 2]", "the request body must be a JSON object, got array"),
    ("a string", b'"q3"', invalid_json(4, "'[' or '{' expected near '\"q3\"'")),
    ("null", b"null", invalid_json(4, "'[' or '{' expected near 'null'")),
    ("empty", b"", "the request body is empty: a JSON object is expected"),
]


def wrong_type(api, name, want, got):
    if api == ANTHROPIC:
        return f"{name}: expected {want}, got {got}"
    return f"'{name}' must be {want}, got {got}"


def rows_for(path):
    """(label, body bytes, status, expected body or None for a 200) for one route."""
    api, good = ROUTES[path]
    ok = (200, None)
    rows = [(label, body, 400, error_body(api, 400, msg)) for label, body, msg in SHARED]
    rows.append(("model of the wrong type", j({**good, "model": 7}), 400,
                 error_body(api, 400, wrong_type(api, "model", "a string", "integer"), "model")))
    rows.append(("model unknown", j({**good, "model": "nope"}), 404,
                 error_body(api, 404, f"model 'nope' not found; available: {AVAILABLE}", "model", "model_not_found")))
    big = j({**good, "pad": "a" * MAX_BODY})
    rows.append(("over --max-body", big, 413,
                 error_body(api, 413, f"the request body has {len(big)} bytes; the limit is {MAX_BODY} (--max-body)",
                            code="request_too_large")))
    if path != "/api/show":
        rows.append(("well-formed", j(good), *ok))
    rows.append(("unknown fields", j({**good, "frobnicate": {"a": [1, None, "x"]}, "zz": -1e300, "": True}), *ok))
    rows.append(("deep nesting in an unknown field",
                 j(good)[:-1] + b', "x": ' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}", *ok))
    for label, extra, status, message, param, *code in OWN.get(path, []):
        rows.append((label, j({**good, **extra}) if isinstance(extra, dict) else extra, status,
                     None if status == 200 else error_body(api, status, message, param, *code)))
    return rows


I32 = 2147483647
# A route's own fields: wrong types, huge and out-of-range numbers.
# (label, fields over the well-formed body (or whole raw bytes), status, message, param)
OWN = {
    "/v1/chat/completions": [
        ("messages a string", {"messages": "hi"}, 400, "'messages' must be an array, got string", "messages"),
        ("max_tokens a string", {"max_tokens": "1"}, 400, "'max_tokens' must be an integer, got string", "max_tokens"),
        ("max_tokens a huge real", {"max_tokens": 1e300}, 400, "'max_tokens' must be an integer, got real", "max_tokens"),
        ("max_tokens past int32", {"max_tokens": 2**62}, 400,
         f"'max_tokens' = {2**62} is outside [1, {I32}]", "max_tokens"),
        ("temperature huge", {"temperature": 1e308}, 400, "'temperature' = 1e+308 is outside [0, 2]", "temperature"),
        ("top_k huge", {"top_k": 2**62}, 400, f"'top_k' = {2**62} is outside [-1, {2**30}]", "top_k"),
        ("seed the smallest int64", {"seed": -2**63}, 200, None, None),
        ("stream a string", {"stream": "yes"}, 400, "'stream' must be a boolean, got string", "stream"),
        ("tools an object", {"tools": {}}, 400, "'tools' must be an array, got object", "tools"),
        ("stop a number", {"stop": 1e300}, 400, "'stop' must be a string or an array of strings, got real", "stop"),
        ("an embedding model asked to chat", {"model": "emb"}, 400, NOT_TEXT, "model", "model_not_supported"),
        ("a voice model asked to chat", {"model": "tts"}, 400,
         "model 'tts' is a text-to-speech model: it speaks on /v1/audio/speech (and speaks the chat answers that ask for "
         "audio), it cannot serve this route", "model", "model_not_supported"),
    ],
    "/v1/completions": [
        ("prompt a number", {"prompt": 7}, 400, "'prompt' must be a string or an array of token ids, got integer", "prompt"),
        ("prompt a huge token id", {"prompt": [2**40]}, 400, "'prompt[0]' must be a token id (a non-negative integer)",
         "prompt[0]"),
        ("prompt a token id past the vocabulary", {"prompt": [I32]}, 400,
         f"prompt token 0 is id {I32}, outside the vocabulary [0, 384)", "prompt"),
        ("max_tokens a huge real", {"max_tokens": 1e300}, 400, "'max_tokens' must be an integer, got real", "max_tokens"),
        ("logprobs huge", {"logprobs": 2**62}, 400, f"'logprobs' = {2**62} is outside [0, 20]", "logprobs"),
    ],
    "/tokenize": [
        ("prompt a number", {"prompt": 7}, 400, "'prompt' must be a string, got integer", "prompt"),
        ("add_special a string", {"add_special": "yes"}, 400, "'add_special' must be a boolean, got string", "add_special"),
    ],
    "/detokenize": [
        ("tokens a string", {"tokens": "x"}, 400, "'tokens' must be an array of token ids, got string", "tokens"),
        ("a huge token id", {"tokens": [1, 2**40]}, 400, "'tokens[1]' must be a token id (a non-negative integer)", "tokens[1]"),
        ("a real token id", {"tokens": [1e300]}, 400, "'tokens[0]' must be a token id (a non-negative integer)", "tokens[0]"),
    ],
    "/v1/messages": [
        ("messages a string", {"messages": "hi"}, 400, "messages: expected an array, got string", "messages"),
        ("max_tokens a string", {"max_tokens": "1"}, 400, "max_tokens: expected an integer >= 1 (it is required), got string",
         "max_tokens"),
        ("max_tokens a huge real", {"max_tokens": 1e300}, 400,
         "max_tokens: expected an integer >= 1 (it is required), got real", "max_tokens"),
        ("max_tokens past int32 (capped)", {"max_tokens": 2**62, "stop_sequences": ["x", " ", "a", "e"]}, 200, None, None),
        ("temperature huge", {"temperature": 1e308}, 400, "temperature: 1e+308 is outside [0, 1]", "temperature"),
        ("system a number", {"system": 7}, 400, "system: expected a string or an array of text blocks, got integer", "system"),
        ("tools a string", {"tools": "x"}, 400, "tools: expected an array, got string", "tools"),
        ("thinking budget past int32", {"thinking": {"type": "enabled", "budget_tokens": 2**62}}, 200, None, None),
    ],
    "/v1/messages/count_tokens": [
        ("messages an object", {"messages": {}}, 400, "messages: expected an array, got object", "messages"),
        ("tools a number", {"tools": 7}, 400, "tools: expected an array, got integer", "tools"),
    ],
    "/api/chat": [
        ("messages a string", {"messages": "hi"}, 400, "'messages' must be an array, got string", "messages"),
        ("options an array", {"options": []}, 400, "'options' must be an object, got array", "options"),
        ("num_predict a huge real", {"options": {"num_predict": 1e300}}, 400,
         "'options.num_predict' must be an integer, got real", "options.num_predict"),
        ("num_predict past int32", {"options": {"num_predict": 2**62}}, 400,
         f"'options.num_predict' = {2**62} is outside [-2, {I32}]", "options.num_predict"),
        ("temperature huge", {"options": {"temperature": 1e308}}, 400,
         "'options.temperature' = 1e+308 is outside [0, 100]", "options.temperature"),
        ("stream a number", {"stream": 1}, 400, "'stream' must be a boolean, got integer", "stream"),
    ],
    "/api/generate": [
        ("prompt a number", {"prompt": 7}, 400, "'prompt' must be a string, got integer", "prompt"),
        ("system a number", {"system": 7}, 400, "'system' must be a string, got integer", "system"),
        ("seed a huge real", {"options": {"seed": 1e300}}, 400, "'options.seed' must be an integer, got real", "options.seed"),
        ("keep_alive an array", {"keep_alive": [1]}, 400,
         "'keep_alive' must be a duration string or a number of seconds, got array", "keep_alive"),
    ],
    "/v1/embeddings": [
        ("a text model asked for embeddings", {"model": "q3"}, 400, NO_EMBED, "model", "model_not_supported"),
        ("a reranker asked for embeddings", {"model": "rr"}, 400,
         "model 'rr' is a reranker (a cross-encoder): it scores (query, document) pairs on /v1/rerank and makes no embeddings",
         "model", "model_not_supported"),
        ("input missing", b'{"model": "emb"}', 400, "'input' is required", "input"),
        ("input a number", {"input": 7}, 400,
         "'input' must be a string, an array of strings or of token ids, got integer", "input"),
        ("input an empty string", {"input": ""}, 400, "'input' is an empty string: there is nothing to embed", "input"),
        ("input an empty array", {"input": []}, 400, "'input' is an empty array: give at least one input", "input"),
        ("an empty string among inputs", {"input": ["a", ""]}, 400,
         "'input[1]' is an empty string: there is nothing to embed", "input[1]"),
        ("an object among inputs", {"input": ["a", {}]}, 400,
         "'input[1]' must be a string or an array of token ids, got object", "input[1]"),
        ("a negative token id", {"input": [1, -2]}, 400, "'input[1]' must be a token id (an integer >= 0)", "input"),
        ("a token id past int32", {"input": [[1, 2**40]]}, 400, "'input[0][1]' must be a token id (an integer >= 0)",
         "input[0]"),
        ("an empty list of token ids", {"input": [[1], []]}, 400, "'input[1]' is an empty list of token ids", "input[1]"),
        ("a token id past the vocabulary", {"input": [[1, 999]]}, 400,
         "input 0: embed: token 1 = 999 is outside the vocabulary [0, 320)", "input"),
        ("too many inputs", {"input": ["a"] * (MAX_INPUTS + 1)}, 400,
         f"'input' holds {MAX_INPUTS + 1} inputs, over this server's limit of {MAX_INPUTS} per request", "input"),
        ("an input over the model's limit", {"input": LONG}, 400, TOO_LONG, "input"),
        ("an input over the limit, truncated", {"input": LONG, "truncate": True}, 200, None, None),
        ("encoding_format unknown", {"encoding_format": "hex"}, 400,
         "'encoding_format' must be \"float\" or \"base64\", not \"hex\"", "encoding_format"),
        ("dimensions zero", {"dimensions": 0}, 400, "'dimensions' = 0 is outside [1, 1048576]", "dimensions"),
        ("dimensions over the model's", {"dimensions": 65}, 400, "'dimensions' is 65, over the 64 dimensions of model 'emb'",
         "dimensions"),
        ("dimensions a string", {"dimensions": "8"}, 400, "'dimensions' must be an integer, got string", "dimensions"),
    ],
    "/api/embed": [
        ("a text model asked for embeddings", {"model": "q3"}, 400, NO_EMBED, "model"),
        ("input a number", {"input": 7}, 400, "'input' must be a string or an array of strings, got integer", "input"),
        ("input token ids", {"input": [1, 2]}, 400, "'input' must be a string or an array of strings, got array", "input"),
        ("input an empty string", {"input": ""}, 400, "'input' is an empty string: there is nothing to embed", "input"),
        ("input an empty array", {"input": []}, 400, "'input' is an empty array: give at least one input", "input"),
        ("too many inputs", {"input": ["a"] * (MAX_INPUTS + 1)}, 400,
         f"'input' holds {MAX_INPUTS + 1} inputs, over this server's limit of {MAX_INPUTS} per request", "input"),
        ("an input over the limit (truncated by default)", {"input": LONG}, 200, None, None),
        ("an input over the limit with truncate false", {"input": LONG, "truncate": False}, 400, TOO_LONG, "input"),
        ("truncate a string", {"truncate": "no"}, 400, "'truncate' must be a boolean, got string", "truncate"),
    ],
    "/api/embeddings": [
        ("prompt missing", b'{"model": "emb"}', 400, "'prompt' (a string) is required", "prompt"),
        ("prompt a list", {"prompt": ["a"]}, 400, "'prompt' must be a string, got array", "prompt"),
        ("prompt an empty string", {"prompt": ""}, 400, "'prompt' is an empty string: there is nothing to embed", "prompt"),
    ],
    "/v1/rerank": [
        ("an embedding model asked to rerank", {"model": "emb"}, 400,
         "model 'emb' is an embedding model, not a reranker (a cross-encoder): it cannot score documents; use /v1/embeddings",
         "model", "model_not_supported"),
        ("query missing", b'{"model": "rr", "documents": ["a"]}', 400, "'query' (a string) is required", "query"),
        ("query a number", {"query": 7}, 400, "'query' must be a string, got integer", "query"),
        ("documents missing", b'{"model": "rr", "query": "q"}', 400, "'documents' (an array of strings) is required",
         "documents"),
        ("documents empty", {"documents": []}, 400, "'documents' is an empty array: give at least one document", "documents"),
        ("a document a number", {"documents": ["a", 7]}, 400,
         "'documents[1]' must be a string (or an object with a string 'text'), got integer", "documents[1]"),
        ("too many documents", {"documents": ["a"] * (MAX_INPUTS + 1)}, 400,
         f"'documents' holds {MAX_INPUTS + 1} documents, over this server's limit of {MAX_INPUTS} per request", "documents"),
        ("top_n zero", {"top_n": 0}, 400, f"'top_n' = 0 is outside [1, {I32}]", "top_n"),
        ("a pair over the model's limit", {"documents": [LONG]}, 400,
         "document 0: rerank: the query and document make 75 tokens, over the model's limit of 64 (truncate to score their start)",
         "documents"),
        ("documents as objects, top_n past the count", {"documents": [{"text": "a"}, {"text": "b"}], "top_n": 9}, 200, None, None),
    ],
    "/v1/responses": [
        ("input missing", b'{"model": "q3"}', 400, "'input' is required", "input"),
        ("input a number", {"input": 7}, 400, "'input' must be a string or an array of input items, got integer", "input"),
        ("an input item a string", {"input": ["hi"]}, 400, "'input[0]' must be an object (an input item), got string",
         "input[0]"),
        ("an input item of no type", {"input": [{}]}, 400,
         "'input[0].type' is required (message, function_call, function_call_output)", "input[0].type"),
        ("a message without content", {"input": [{"type": "message", "role": "user"}]}, 400,
         "'input[0].content' is required", "input[0].content"),
        ("an image part", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400,
         "'input[0].content[0].type' = 'input_image' is not supported: this server reads text parts (input_text, "
         "output_text)", "input[0].content[0].type"),
        ("max_output_tokens a huge real", {"max_output_tokens": 1e300}, 400,
         "'max_output_tokens' must be an integer, got real", "max_output_tokens"),
        ("max_output_tokens past int32", {"max_output_tokens": 2**62}, 400,
         f"'max_output_tokens' = {2**62} is outside [1, {I32}]", "max_output_tokens"),
        ("temperature huge", {"temperature": 1e308}, 400, "'temperature' = 1e+308 is outside [0, 2]", "temperature"),
        ("tools an object", {"tools": {}}, 400, "'tools' must be an array, got object", "tools"),
        ("text.format a string", {"text": {"format": "json"}}, 400, "'text.format' must be an object, got string",
         "text.format"),
        ("store a string", {"store": "no"}, 400, "'store' must be a boolean, got string", "store"),
        ("previous_response_id unknown", {"previous_response_id": "resp_nope"}, 404,
         "previous response with id 'resp_nope' not found (it was never stored, was deleted, or the store evicted it: "
         "SARAGOSSA_SERVE_RESPONSES_MAX)", "previous_response_id", "previous_response_not_found"),
        ("previous_response_id a number", {"previous_response_id": 1e300}, 400,
         "'previous_response_id' must be a string, got real", "previous_response_id"),
        ("metadata an array", {"metadata": [1]}, 400, "'metadata' must be an object of strings, got array", "metadata"),
        ("an embedding model asked to respond", {"model": "emb"}, 400, NOT_TEXT, "model", "model_not_supported"),
        ("stored false, seed the smallest int64", {"store": False, "seed": -2**63}, 200, None, None),
    ],
    "/v1/audio/speech": [
        ("a text model asked to speak", {"model": "q3"}, 400,
         "model 'q3' is a text model: /v1/audio/speech needs a text-to-speech model (--tts-model)", "model",
         "model_not_supported"),
        ("an embedding model asked to speak", {"model": "emb"}, 400,
         "model 'emb' is an embedding model: /v1/audio/speech needs a text-to-speech model (--tts-model)", "model",
         "model_not_supported"),
        ("OpenAI's model name", {"model": "tts-1"}, 200, None, None),
        ("model missing", b'{"input": "hi", "voice": "alloy"}', 400, "'model' is required (a --tts-model name, or tts-1)",
         "model"),
        ("input missing", b'{"model": "tts", "voice": "alloy"}', 400, "'input' (the text to speak) is required", "input"),
        ("input a number", {"input": 7}, 400, "'input' must be a string, got integer", "input"),
        ("input empty", {"input": ""}, 400, "'input' is empty: there is nothing to speak", "input"),
        ("input over the cap", {"input": "a" * 4097}, 400, "'input' has 4097 characters; the maximum is 4096", "input"),
        ("voice missing", b'{"model": "tts", "input": "hi"}', 400,
         "'voice' is required (a voice of the model, or an OpenAI voice name such as alloy for the model's default)", "voice"),
        ("voice a number", {"voice": 7}, 400, "'voice' must be a string, got integer", "voice"),
        ("voice an object without id", {"voice": {}}, 400, "'voice' as an object needs an 'id' (a voice name)", "voice"),
        ("voice unknown", {"voice": "nobody"}, 400,
         "unknown voice 'nobody'; this model's voices are: lo, hi (OpenAI's voice names, alloy to cedar, mean its default "
         "voice)", "voice"),
        ("voice the model's own", {"voice": "hi"}, 200, None, None),
        ("response_format aac", {"response_format": "aac"}, 400,
         "'response_format' aac is not available: this server has no AAC encoder; use mp3, opus, flac, wav or pcm",
         "response_format"),
        ("response_format unknown", {"response_format": "ogg"}, 400,
         "'response_format' must be mp3, opus, aac, flac, wav or pcm, not 'ogg'", "response_format"),
        ("response_format a number", {"response_format": 1}, 400, "'response_format' must be a string, got integer",
         "response_format"),
        ("speed huge", {"speed": 1e300}, 400, "'speed' = 1e+300 is outside [0.25, 4]", "speed"),
        ("speed a string", {"speed": "1"}, 400, "'speed' must be a number, got string", "speed"),
        ("stream_format unknown", {"stream_format": "chunks"}, 400, "'stream_format' must be audio or sse, not 'chunks'",
         "stream_format"),
        ("instructions a number", {"instructions": 1}, 400, "'instructions' must be a string, got integer", "instructions"),
        ("instructions given", {"instructions": "Speak softly."}, 200, None, None),
        ("stream false with sse", {"stream": False, "stream_format": "sse"}, 400,
         "'stream': false asks for one whole file; stream_format sse streams events", "stream"),
        ("ref_audio a number", {"ref_audio": 1, "x_vector_only": True}, 400,
         "'ref_audio' must be a base64 string, got integer", "ref_audio"),
        ("ref_audio not base64", {"ref_audio": "UklG!RiQ=", "x_vector_only": True}, 400,
         "'ref_audio' is not valid base64 (at character 4)", "ref_audio"),
        ("ref_audio padding inside", {"ref_audio": "UQ==UklG", "x_vector_only": True}, 400,
         "'ref_audio' is not valid base64 (at character 4)", "ref_audio"),
        ("ref_audio one character too many", {"ref_audio": "UklGR", "x_vector_only": True}, 400,
         "'ref_audio' is not valid base64 (at character 5)", "ref_audio"),
        ("ref_audio empty", {"ref_audio": "", "x_vector_only": True}, 400, "'ref_audio' is empty", "ref_audio"),
        ("ref_audio a data URL not in base64", {"ref_audio": "data:audio/wav,RIFF", "x_vector_only": True}, 400,
         "'ref_audio' as a data: URL must be base64 (data:audio/wav;base64,...)", "ref_audio"),
        ("ref_text without ref_audio", {"ref_text": "Hello."}, 400,
         "'ref_text' is the transcript of 'ref_audio', which is missing", "ref_text"),
        ("ref_text a number", {"ref_audio": "UklGRg==", "ref_text": 5}, 400, "'ref_text' must be a string, got integer",
         "ref_text"),
        ("x_vector_only without ref_audio", {"x_vector_only": True}, 400,
         "'x_vector_only' clones the voice of 'ref_audio', which is missing", "x_vector_only"),
        ("x_vector_only a string", {"ref_audio": "UklGRg==", "x_vector_only": "yes"}, 400,
         "'x_vector_only' must be a boolean, got string", "x_vector_only"),
        ("ref_audio without ref_text", {"ref_audio": "UklGRg=="}, 400,
         "'ref_text' (the transcript of 'ref_audio') is required for in-context cloning; or send \"x_vector_only\": true "
         "to clone from the speaker embedding alone", "ref_text"),
        ("a voice that cannot clone", {"ref_audio": "UklGRg==", "x_vector_only": True}, 400,
         "speak: tone voices cannot clone a voice from a reference clip (a Qwen3-TTS Base model can)", "input"),
    ],
    "/api/show": [
        ("name instead of model", b'{"name": "q3"}', 200, None, None),
        ("name of the wrong type", b'{"name": 7}', 400, "'name' must be a string, got integer", "name"),
        ("no model", b"{}", 400, "'model' (a string) is required", "model"),
    ],
}

TABLE = [(path, *row) for path in ROUTES for row in rows_for(path)]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("malformed")
    model = make_qwen3_agent_model(d / "q3")
    emb = make_embed_model(d / "emb")
    s = Server("--model", f"q3={model}", "--embed-model", f"emb={emb}", "--embed-model",
               f"rr={ROOT / 'tests' / 'fixtures' / 'cross_encoder'}", "--tts-model",
               f"tts={ROOT / 'tests' / 'fixtures' / 'tts' / 'test.tone.json'}", "--ctx", "2048", "--max-body", str(MAX_BODY),
               socket_path=str(d / "s.sock"), env={"SARAGOSSA_LOG": "error", "SARAGOSSA_SERVE_EMBED_MAX_INPUTS": str(MAX_INPUTS),
                    "RETI_SERVE_MODEL_POOL": "4"})  # all four resident: no reload between rows
    yield s
    s.stop()


def ask(c, path, body):
    return c.post(path, content=body, headers={"Content-Type": "application/json"})


def check(c, path, label, body, status, want):
    r = ask(c, path, body)
    assert r.status_code == status, (path, label, r.status_code, r.text[:400])
    if path == "/v1/audio/speech" and status == 200:  # the audio itself
        assert r.headers["content-type"] == "audio/pcm" and len(r.content) > 0, (path, label)
        return
    assert r.headers["content-type"] == "application/json", (path, label)
    if want is None:
        assert isinstance(r.json(), dict)
        return
    got = r.json()
    assert got == want, (path, label, got)


@pytest.mark.parametrize("path,label,body,status,want", TABLE, ids=[f"{t[0]} {t[1]}" for t in TABLE])
def test_malformed_request(srv, path, label, body, status, want):
    with srv.client() as c:
        check(c, path, label, body, status, want)


def test_table_covers_every_route_and_case():
    assert len(TABLE) >= 12 * 20
    for path in ROUTES:
        labels = {t[1] for t in TABLE if t[0] == path}
        assert {"cut short", "not an object", "model of the wrong type", "an integer past int64", "a real past double",
                "nesting past the parser's depth", "unknown fields", "over --max-body"} <= labels, path


# ---- clients that go away early ----

def raw(srv, data, read=False, linger=0.0):
    """Opens a connection, sends data, optionally waits and reads a little, then closes it."""
    c = socket.socket(socket.AF_UNIX)
    c.connect(srv.socket)
    c.sendall(data)
    if linger:
        time.sleep(linger)
    got = b""
    if read:
        c.settimeout(30)  # a whole 400-token answer comes first: seconds on a loaded machine
        got = c.recv(256)
    c.close()
    return got


def head(path, extra=b""):
    return b"POST " + path.encode() + b" HTTP/1.1\r\nHost: sg\r\nContent-Type: application/json\r\n" + extra


def early_disconnects(srv):
    for path, (_, good) in ROUTES.items():
        body = j(good)
        raw(srv, head(path)[:20])  # mid request line
        raw(srv, head(path))  # mid headers
        raw(srv, head(path, b"Content-Length: %d\r\n\r\n" % len(body)) + body[:len(body) // 2])  # mid body
        raw(srv, head(path, b"Transfer-Encoding: chunked\r\n\r\n") + b"%x\r\n" % len(body) + body[:5])  # mid chunk
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/api/chat", "/api/generate", "/v1/responses"):
        _, good = ROUTES[path]
        long = {**good, "max_tokens": 400} if "max_tokens" in good else {**good, "options": {"num_predict": 400}}
        if "max_output_tokens" in good:
            long = {**good, "max_output_tokens": 400}
        for stream in (False, True):
            body = j({**long, "stream": stream})
            req = head(path, b"Content-Length: %d\r\n\r\n" % len(body)) + body
            raw(srv, req)  # the whole request, then gone before the answer
            got = raw(srv, req, read=True)  # gone after the first bytes of the answer
            assert got.startswith(b"HTTP/1.1 200"), (path, stream, got)


def idle(srv):
    """The worker is idle again: no generation left running for a client that went away."""
    with srv.client() as c:
        for _ in range(100):
            h = c.get("/health").json()
            if not h["busy"] and not h["queued"]:
                return h
            time.sleep(0.05)
    raise AssertionError(f"the worker is still busy: {h}")


def test_clients_that_go_away_early_leave_the_server_serving(srv):
    early_disconnects(srv)
    idle(srv)
    with srv.client() as c:
        for path, (_, good) in ROUTES.items():
            if path != "/api/show" and not path.endswith("embeddings") and path not in ("/api/embed", "/v1/rerank"):
                r = ask(c, path, j(good))
                assert r.status_code == 200, (path, r.text)


def test_memory_stays_flat_over_hundreds_of_bad_requests(srv):
    def one_round():
        with srv.client() as c:
            for path, label, body, status, want in TABLE:
                assert ask(c, path, body).status_code == status, (path, label)
        early_disconnects(srv)
        idle(srv)

    one_round()  # warm-up: the allocator's arenas, the worker's buffers
    rss0 = srv.rss_kb()
    for _ in range(2):
        one_round()
    rss1 = srv.rss_kb()
    assert 2 * len(TABLE) >= 500
    assert rss1 - rss0 < 4 * 1024, (rss0, rss1)
    with srv.client() as c:
        assert c.get("/health").status_code == 200


# ---- Ollama's model management (/api/pull, /api/delete, /api/copy) ----
# A well-formed pull needs a hub and a delete would take q3 away, so these routes are not in ROUTES:
# the bodies every route refuses alike, and their own bad fields, are checked here.
MANAGE = {"/api/pull": ("POST", {"model": "org/name"}), "/api/delete": ("DELETE", {"model": "q3"}),
          "/api/copy": ("POST", {"source": "q3", "destination": "q3-copy"})}


def manage(c, path, body):
    return c.request(MANAGE[path][0], path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("path", list(MANAGE))
@pytest.mark.parametrize("label,body,message", SHARED, ids=[s[0] for s in SHARED])
def test_model_management_refuses_bad_bodies_alike(srv, path, label, body, message):
    with srv.client() as c:
        r = manage(c, path, body)
    assert r.status_code == 400 and r.json() == {"error": message}, (path, label, r.text)


@pytest.mark.parametrize("path,body,status,message", [
    ("/api/pull", {"model": 7}, 400, "'model' must be a string, got integer"),
    ("/api/pull", {"model": "org/name", "stream": "yes"}, 400, "'stream' must be a boolean, got string"),
    ("/api/pull", {"model": "tiny\u0000x"}, 400, None),
    ("/api/pull", {"model": "llama3.2"}, 400, None),
    ("/api/pull", {}, 400, "'model' (a model name) is required"),
    ("/api/delete", {"model": "nope"}, 404, "model 'nope' not found"),
    ("/api/delete", {"name": 7}, 400, "'name' must be a string, got integer"),
    ("/api/copy", {"source": "nope", "destination": "x"}, 404, "model 'nope' not found"),
    ("/api/copy", {"source": "q3"}, 400, "'destination' (a model name) is required"),
    ("/api/copy", {"source": "q3", "destination": "emb"}, 409,
     "a model named 'emb' is already served; delete it first"),
    ("/api/copy", {"source": "q3", "destination": "a" * 200}, 400, "'destination' is longer than 127 bytes"),
])
def test_model_management_names_the_bad_field(srv, path, body, status, message):
    with srv.client() as c:
        r = manage(c, path, j(body))
        assert r.status_code == status, r.text
        assert isinstance(r.json()["error"], str)
        if message:
            assert r.json()["error"] == message
        big = j({**MANAGE[path][1], "pad": "a" * MAX_BODY})
        r = manage(c, path, big)
        assert r.status_code == 413 and "--max-body" in r.json()["error"]
        assert c.get("/api/tags").status_code == 200
        assert {m["name"] for m in c.get("/api/tags").json()["models"]} == {"q3", "emb", "rr", "tts"}
