"""Speculative decoding through the CLI and the server on a tiny fixture model with a trained
tokenizer: the text with a drafter is the text without one (greedy, and sampled with one seed), the
metrics report the guesses, the server takes the drafter per model and per request (OpenAI's
`speculative` extension and `prediction`, Ollama's options.speculative), and bad values are 400s
or usage errors."""
import json
import re

import httpx
import ollama
import openai
import pytest

from server_util import KEY, Server, free_port, make_test_model

EDIT = ("Hello, world! The quick brown fox jumps over the lazy dog. What is the capital of France? "
        "Paris is the capital of France. Hello, world! The quick brown fox")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(make_test_model("qwen3", tmp_path_factory.mktemp("spec") / "q3", 384))


def gen(sg, model, *extra, temp="0", seed="7", env=None):
    r = sg("generate", "--model", model, "--prompt", EDIT, "--temperature", temp, "--seed", seed, "--max-tokens", "48",
           "--json", "--ctx", "256", *extra, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("temp", ["0", "0.9"])
def test_generate_with_each_drafter_gives_the_plain_text(sg, model, temp):
    plain = gen(sg, model, temp=temp)
    assert "spec_verify_steps" not in plain["metrics"]
    ngram = gen(sg, model, "--spec", "ngram", "--draft-max", "6", temp=temp)
    # sampled: the draft model's greedy guesses checked against the target's own draw give the plain
    # text; its sampled guesses (rejection sampling, the default) the plain distribution, not the text
    draft = gen(sg, model, "--draft-model", model, "--draft-max", "4", temp=temp,
                env={"SARAGOSSA_SPEC_REJECTION": "0"} if temp != "0" else None)
    assert ngram["text"] == plain["text"] and ngram["finish_reason"] == plain["finish_reason"]
    assert draft["text"] == plain["text"]
    for out in (ngram, draft):
        m = out["metrics"]
        assert m["generated_tokens"] == plain["metrics"]["generated_tokens"]
        assert m["spec_verify_steps"] > 0 and 0 <= m["spec_accepted_tokens"] <= m["spec_drafted_tokens"]
        assert m["spec_tokens_per_verify"] >= 1
    if temp == "0":
        # the target as its own draft model guesses right every time
        assert draft["metrics"]["spec_accepted_tokens"] == draft["metrics"]["spec_drafted_tokens"] > 0
    else:
        rs = gen(sg, model, "--draft-model", model, "--draft-max", "4", temp=temp)
        m = rs["metrics"]
        assert m["generated_tokens"] > 0
        # q = p (the target drafts for itself): min(1, p/q) keeps (nearly) every guess
        assert m["spec_drafted_tokens"] > 0 and m["spec_accepted_tokens"] >= 0.9 * m["spec_drafted_tokens"]
        again = gen(sg, model, "--draft-model", model, "--draft-max", "4", temp=temp)
        assert again["text"] == rs["text"], "one seed, one answer"


def test_generate_metrics_line_and_kill_switch(sg, model):
    r = sg("generate", "--model", model, "--prompt", EDIT, "--temperature", "0", "--max-tokens", "24", "--ctx", "256",
           "--spec", "ngram", "--metrics", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "speculative:" in r.stderr and "tokens per verify step" in r.stderr
    off = sg("generate", "--model", model, "--prompt", EDIT, "--temperature", "0", "--max-tokens", "24", "--ctx", "256",
             "--spec", "ngram", "--metrics", env={"SARAGOSSA_SPEC_NGRAM": "0"}, timeout=300)
    assert off.returncode == 0, off.stderr
    assert "switched off" in off.stderr and "speculative:" not in off.stderr
    assert off.stdout == r.stdout


def test_debug_log_times_every_verify_step(sg, model):
    """SARAGOSSA_LOG=debug: a line per verify step (logged when the next step starts, so the answer's
    last one may be missing), with its guesses and the kept ones; the target drafting for itself keeps all."""
    r = sg("generate", "--model", model, "--prompt", EDIT, "--temperature", "0", "--max-tokens", "48", "--ctx", "256",
           "--json", "--draft-model", model, "--draft-max", "4", env={"SARAGOSSA_LOG": "debug"}, timeout=300)
    assert r.returncode == 0, r.stderr
    steps = re.findall(r"spec: a verify step of (\d+) guesses kept (\d+) \(\d+ tokens in the history\): "
                       r"([\d.]+) ms, a plain step ([\d.]+) ms", r.stderr)
    m = json.loads(r.stdout)["metrics"]
    assert m["spec_verify_steps"] - 1 <= len(steps) <= m["spec_verify_steps"] and steps
    assert all(1 <= int(g) <= 4 and int(k) == int(g) and float(t) > 0 for g, k, t, _ in steps)


@pytest.mark.parametrize("args, msg", [
    (["--spec", "medusa"], "--spec wants ngram, mtp or none"),
    (["--draft-max", "0"], "--draft-max wants an integer"),
    (["--draft-max", "4", "--draft-min", "5"], "--draft-min 5 is above --draft-max 4"),
    (["--spec", "ngram", "--draft-model", "x"], "pick one"),
])
def test_generate_bad_spec_options_are_usage_errors(sg, model, args, msg):
    r = sg("generate", "--model", model, "--prompt", "hi", *args, timeout=120)
    assert r.returncode != 0
    assert msg in r.stderr


def test_draft_model_with_another_vocabulary_is_refused(sg, model, tmp_path):
    other = make_test_model("qwen3", tmp_path / "other", 300)
    r = sg("generate", "--model", model, "--prompt", "hi", "--draft-model", str(other), timeout=120)
    assert r.returncode != 0
    assert "vocabulary" in r.stderr


@pytest.fixture(scope="module")
def srv(model, tmp_path_factory):
    d = tmp_path_factory.mktemp("specsrv")
    s = Server("--model", f"q3={model}", "--ctx", "256", "--spec", "ngram", "--draft-max", "6",
               socket_path=str(d / "s.sock"), port=free_port(), key=KEY)
    yield s
    s.stop()


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


def chat(oai, **kw):
    return oai.chat.completions.create(model="q3", messages=[{"role": "user", "content": EDIT}], max_tokens=40,
                                       temperature=0, **kw)


def test_server_speculates_per_model_and_per_request_with_the_same_text(oai):
    on = chat(oai)
    off = chat(oai, extra_body={"speculative": "none"})
    obj = chat(oai, extra_body={"speculative": {"type": "ngram", "draft_max": 3}})
    pred = chat(oai, extra_body={"speculative": "none"}, prediction={"type": "content", "content": EDIT})
    assert on.choices[0].message.content == off.choices[0].message.content == obj.choices[0].message.content
    assert pred.choices[0].message.content == off.choices[0].message.content
    d = on.usage.completion_tokens_details
    assert d is not None and d.accepted_prediction_tokens + d.rejected_prediction_tokens > 0
    assert off.usage.completion_tokens_details is None
    # speculative "none" wins over a prediction
    assert pred.usage.completion_tokens_details is None
    pred2 = chat(oai, prediction={"type": "content", "content": EDIT})
    assert pred2.choices[0].message.content == off.choices[0].message.content
    assert pred2.usage.completion_tokens_details.accepted_prediction_tokens >= 0


def test_server_streams_the_same_text_with_speculation(oai):
    plain = chat(oai, extra_body={"speculative": "none"}).choices[0].message.content
    parts = []
    for ch in chat(oai, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            parts.append(ch.choices[0].delta.content)
    assert "".join(parts) == plain


def test_server_json_mode_holds_with_speculation(srv):
    # the constraint masks every step's logits, verified rows included: the same answer (or the
    # same incomplete-JSON error) with guesses that the grammar forbids
    outs = []
    for extra in ({"speculative": "none"}, {"prediction": {"type": "content", "content": '{"a": 1} ' + EDIT}},
                  {"speculative": "ngram"}):
        b = {"model": "q3", "messages": [{"role": "user", "content": EDIT}], "max_tokens": 60, "temperature": 0,
             "response_format": {"type": "json_object"}, **extra}
        with srv.client() as c:
            r = c.post("/v1/chat/completions", json=b)
        body = r.json()
        outs.append((r.status_code, body["choices"][0]["message"]["content"] if r.status_code == 200 else body["error"]["message"]))
    assert outs[0] == outs[1] == outs[2]


def test_ollama_options_speculative(srv):
    c = ollama.Client(host=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {KEY}"})
    msgs = [{"role": "user", "content": EDIT}]
    a = c.chat(model="q3", messages=msgs, options={"temperature": 0, "num_predict": 30, "speculative": "none"})
    b = c.chat(model="q3", messages=msgs, options={"temperature": 0, "num_predict": 30, "speculative": "ngram"})
    assert a.message.content == b.message.content
    assert "draft_count" not in a.model_dump() or a.model_dump().get("draft_count") is None


@pytest.mark.parametrize("body, param", [
    ({"speculative": "medusa"}, "speculative"),
    ({"speculative": 3}, "speculative"),
    ({"speculative": {"type": "ngram", "draft_max": 0}}, "speculative.draft_max"),
    ({"speculative": {"draft_max": 2, "draft_min": 3}}, "speculative"),
    ({"prediction": {"type": "text", "content": "x"}}, "prediction.type"),
    ({"prediction": {"type": "content", "content": 5}}, "prediction.content"),
])
def test_server_bad_spec_fields_are_400s(srv, body, param):
    b = {"model": "q3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    with srv.client() as c:
        r = c.post("/v1/chat/completions", json=b)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_memory_guard_counts_the_draft_models_weights(model, tmp_path):
    # a draft model of 2 GiB (a sparse weight file: the guard projects its size before loading it)
    import shutil
    big = tmp_path / "big"
    shutil.copytree(model, big)
    with open(big / "model.safetensors", "r+b") as f:
        f.truncate(2 << 30)
    with Server("--model", f"q3={model}", port=free_port(), key=KEY) as probe:
        cap = probe.rss_kb() * 1024 + (64 << 20)
    env = {"RETI_SERVE_MEMORY_CAP_BYTES": str(cap)}
    # the target alone fits under the cap
    with Server("--model", f"q3={model}", "--draft-model", model, port=free_port(), key=KEY, env=env) as s:
        with s.client() as c:
            assert c.get("/health").status_code == 200
    s = Server("--model", f"q3={model}", "--draft-model", str(big), port=free_port(), key=KEY, env=env, wait=False)
    try:
        assert s.proc.wait(timeout=60) != 0
        err = s.stderr()
        assert "with its draft model" in err and "RETI_SERVE_MEMORY_CAP_BYTES" in err, err
    finally:
        s.stop()


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory):
    return str(make_test_model("qwen3_next_mtp", tmp_path_factory.mktemp("mtp") / "q3n", 320))


@pytest.mark.parametrize("temp", ["0", "0.9"])
def test_generate_with_mtp_gives_the_plain_text(sg, mtp_model, temp):
    plain = gen(sg, mtp_model, temp=temp)
    mtp = gen(sg, mtp_model, "--spec", "mtp", "--draft-max", "3", temp=temp)
    assert mtp["text"] == plain["text"] and mtp["finish_reason"] == plain["finish_reason"]
    m = mtp["metrics"]
    assert m["generated_tokens"] == plain["metrics"]["generated_tokens"]
    assert m["spec_verify_steps"] > 0 and m["spec_drafted_tokens"] > 0


def test_spec_mtp_without_a_module_or_switched_off_decodes_plainly(sg, model, mtp_model):
    # a model without mtp.* tensors: a note, the plain answer
    r = sg("generate", "--model", model, "--prompt", EDIT, "--temperature", "0", "--max-tokens", "12", "--ctx", "256",
           "--spec", "mtp", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "no MTP module" in r.stderr
    off = sg("generate", "--model", mtp_model, "--prompt", EDIT, "--temperature", "0", "--max-tokens", "12", "--ctx", "256",
             "--spec", "mtp", "--metrics", env={"SARAGOSSA_SPEC_MTP": "0"}, timeout=300)
    assert off.returncode == 0, off.stderr
    assert "switched off" in off.stderr and "speculative:" not in off.stderr
    r = sg("generate", "--model", mtp_model, "--prompt", "hi", "--spec", "mtp", "--draft-model", mtp_model, timeout=120)
    assert r.returncode != 0 and "pick one" in r.stderr


def test_server_speculates_with_mtp(mtp_model, tmp_path):
    with Server("--model", f"m={mtp_model}", "--ctx", "256", "--spec", "mtp", port=free_port(), key=KEY) as s:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0)
        kw = dict(model="m", messages=[{"role": "user", "content": EDIT}], max_tokens=30, temperature=0)
        on = c.chat.completions.create(**kw)
        off = c.chat.completions.create(**kw, extra_body={"speculative": "none"})
        assert on.choices[0].message.content == off.choices[0].message.content
        d = on.usage.completion_tokens_details
        assert d is not None and d.accepted_prediction_tokens + d.rejected_prediction_tokens > 0
        # a second turn: the module's state follows the conversation (prefix reuse included)
        again = c.chat.completions.create(**kw, extra_body={"speculative": "mtp"})
        assert again.choices[0].message.content == off.choices[0].message.content
