"""The block prefix cache of `saragossa serve`, driven by the official `openai` client on tiny
fixture models (test tokenizer + ChatML template), with blocks of 16 tokens so short chats fill
them: a later turn restores the earlier turn's blocks (header and usage agree, equal to the
block-aligned shared prefix), session keys partition the cache, a miss says where the prompt
left the cached chain, and greedy answers are identical with the cache on and off."""
import httpx
import openai
import pytest

from server_util import KEY, ROOT, Server, free_port, make_test_model

BLOCK = 16
CHATML_TURN = "<|im_start|>{}\n{}<|im_end|>\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("pc-models")
    return {"qwen": make_test_model("qwen3", d / "qwen3", 384), "llama": make_test_model("llama", d / "llama", 320)}


def serve(models, names, extra=(), env=None):
    args = []
    for n in names:
        args += ["--model", f"{n}={models[n]}"]
    e = {"RETI_SERVE_PREFIX_BLOCK_TOKENS": str(BLOCK)}
    e.update(env or {})
    return Server(*args, *extra, port=free_port(), key=KEY, env=e)


@pytest.fixture(scope="module")
def srv(models):
    s = serve(models, ["qwen", "llama"])
    yield s
    s.stop()


def client(s):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=KEY, max_retries=0)


def chat(s, messages, session=None, user=None, model="qwen", max_tokens=6):
    """One greedy chat turn: (text, reused-tokens header, miss header, usage)."""
    kw = {"extra_headers": {"x-saragossa-session": session}} if session else {}
    if user:
        kw["user"] = user
    raw = client(s).chat.completions.with_raw_response.create(model=model, messages=messages, max_tokens=max_tokens,
                                                              temperature=0, **kw)
    r = raw.parse()
    reused = raw.headers.get("x-saragossa-reused-prefix-tokens")
    miss = raw.headers.get("x-saragossa-prefix-miss")
    return r.choices[0].message.content, int(reused) if reused is not None else None, \
        int(miss) if miss is not None else None, r.usage


def prompt_ids(s, messages, model="qwen"):
    text = "".join(CHATML_TURN.format(m["role"], m["content"]) for m in messages) + "<|im_start|>assistant\n"
    with s.client() as c:
        r = c.post("/tokenize", json={"model": model, "prompt": text, "add_special": False})
        assert r.status_code == 200, r.text
        return r.json()["tokens"]


def common(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


FIRST = [{"role": "system", "content": "You answer briefly and clearly, please. The quick brown fox."},
         {"role": "user", "content": "What is the capital of France? Hello, world! The quick brown fox jumps."}]


def turn_two(first_answer, question="And the capital of Spain, please?"):
    return FIRST + [{"role": "assistant", "content": first_answer}, {"role": "user", "content": question}]


def evict_live_state(s, model="qwen"):
    """Another session's request: the live state is no longer this session's, so a later turn
    can only reuse its own blocks."""
    chat(s, [{"role": "user", "content": "0123456789 + - * / = ( ) [ ] { } < > , . ; :"}], session="someone-else",
         model=model, max_tokens=2)


def test_turn_two_restores_the_block_aligned_prefix_of_turn_one(srv):
    a1, reused1, _, u1 = chat(srv, FIRST, session="alice")
    assert reused1 == 0 and u1.prompt_tokens_details.cached_tokens == 0
    evict_live_state(srv)
    convo = turn_two(a1)
    a2, reused2, _, u2 = chat(srv, convo, session="alice")
    p1, p2 = prompt_ids(srv, FIRST), prompt_ids(srv, convo)
    assert len(p1) == u1.prompt_tokens and len(p2) == u2.prompt_tokens
    want = min(common(p1, p2), len(p2) - 1) // BLOCK * BLOCK
    assert want >= BLOCK, "the test prompts share less than one block"
    assert reused2 == want
    assert u2.prompt_tokens_details.cached_tokens == want


def test_a_session_never_reuses_another_sessions_blocks(srv):
    a1, _, _, _ = chat(srv, FIRST, session="bob")
    evict_live_state(srv)
    convo = turn_two(a1, "Where is Paris?")
    _, reused, _, u = chat(srv, convo, session="carol")
    assert reused == 0 and u.prompt_tokens_details.cached_tokens == 0
    _, reused, _, _ = chat(srv, convo, user="dave")  # the `user` field keys the session too
    assert reused == 0
    _, reused, _, _ = chat(srv, convo, session="bob")
    assert reused >= BLOCK, "bob's own blocks are reused"


def test_the_openai_user_field_is_a_session_key(srv):
    a1, _, _, _ = chat(srv, FIRST, user="erin")
    evict_live_state(srv)
    _, reused, _, _ = chat(srv, turn_two(a1), user="erin")
    assert reused >= BLOCK


def test_a_miss_says_where_the_prompt_left_the_cached_chain(srv):
    chat(srv, FIRST, session="frank")
    evict_live_state(srv)
    edited = [FIRST[0], {"role": "user", "content": FIRST[1]["content"].replace("France", "Italy")}]
    p1, p2 = prompt_ids(srv, FIRST), prompt_ids(srv, edited)
    d = common(p1, p2)
    assert d < len(p1) // BLOCK * BLOCK, "the edit must fall inside a cached block"
    _, reused, miss, _ = chat(srv, edited, session="frank")
    assert miss == d
    assert reused == d // BLOCK * BLOCK


def byte_level_ids(model_dir, pieces):
    """Token ids of the answer's tokens from their bytes (the chat logprobs' `bytes`): in a
    byte-level BPE vocabulary a token is its bytes, each written as one printable character
    (printable Latin-1 bytes as themselves, the others as 256 + their rank)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    char = {b: chr(b) for b in keep}
    for i, b in enumerate(b for b in range(256) if b not in char):
        char[b] = chr(256 + i)
    ids = [tok.token_to_id("".join(char[b] for b in p)) for p in pieces]
    assert None not in ids, pieces
    return ids


def test_follow_up_in_the_same_session_reuses_the_live_state_beyond_the_blocks(srv, models):
    """The fixtures' weights are bf16, whose blocked GEMM sums like the one-token kernel: the
    forward is chunk-invariant, so the next request continues from the live state, the first
    prompt and the first answer's tokens included, not just the whole blocks. (The follow-up is
    sent as token ids: a random model's answer is seldom valid UTF-8, so its text would not
    tokenize back to the same ids; the answer's ids are read from the logprobs' bytes up to the
    first token that is part of a character.)"""
    lossy = [0xEF, 0xBF, 0xBD]  # U+FFFD: a token holding part of a character
    for q in ["What is the capital of France?", "Hello, world!", "The quick brown fox jumps.", "0123456789 + 1 = ?",
              "Please answer briefly.", "And the capital of Spain, please?"]:
        msgs = [FIRST[0], {"role": "user", "content": q}]
        r = client(srv).chat.completions.create(model="qwen", messages=msgs, max_tokens=6, temperature=0, logprobs=True,
                                                extra_headers={"x-saragossa-session": "gina"})
        pieces = [c.bytes for c in r.choices[0].logprobs.content]
        k = next((i for i, p in enumerate(pieces) if any(p[j:j + 3] == lossy for j in range(len(p)))), len(pieces))
        if k >= 2:
            break
    assert k >= 2, "no candidate question gives an answer starting with two whole-character tokens"
    p1 = prompt_ids(srv, msgs)
    assert r.usage.prompt_tokens == len(p1)
    gen = byte_level_ids(models["qwen"], pieces[:k])
    with srv.client() as c:
        more = c.post("/tokenize", json={"model": "qwen", "add_special": False,
                                         "prompt": "<|im_end|>\n<|im_start|>user\nAnd Spain?<|im_end|>\n<|im_start|>assistant\n"})
        p2 = p1 + gen + more.json()["tokens"]
        r2 = c.post("/v1/completions", headers={"x-saragossa-session": "gina"},
                    json={"model": "qwen", "prompt": p2, "max_tokens": 2, "temperature": 0})
    assert r2.status_code == 200, r2.text
    reused = int(r2.headers["x-saragossa-reused-prefix-tokens"])
    assert reused == r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    # the live state evaluated the prompt and every answer token but the last (sampled, never fed back)
    assert reused == len(p1) + min(k, len(pieces) - 1), (reused, len(p1), k, len(p1) // BLOCK * BLOCK)


def conversation(s, model, interleave):
    """Three greedy turns of one session; optionally another session runs between turns so the
    turns restore from blocks rather than from the live state."""
    msgs = list(FIRST)
    out = []
    for q in ["And the capital of Spain, please?", "Hello, world! What is 0123456789 + 1?"]:
        a, _, _, _ = chat(s, msgs, session="identity", model=model, max_tokens=12)
        out.append(a)
        if interleave:
            evict_live_state(s, model)
        msgs = msgs + [{"role": "assistant", "content": a}, {"role": "user", "content": q}]
    a, reused, _, _ = chat(s, msgs, session="identity", model=model, max_tokens=12)
    out.append(a)
    return out, reused


@pytest.mark.parametrize("model", ["qwen", "llama", "gemma", "q4"])
def test_greedy_answers_are_identical_with_the_cache_on_and_off(models, model, tmp_path):
    env = {}
    if model == "q4":
        # 4-bit weights: not chunk-invariant, so a follow-up keeps the whole blocks its live state
        # holds and restores the others, never the answer's decode steps
        models = dict(models, q4=make_test_model("qwen3_mlx_q4_g32", tmp_path / "q4", 384))
    if model == "gemma":
        # gemma3_text slides a window of 8; chunks of 8 give rings of 16 rows, which the
        # conversation wraps many times: blocks and roll-backs of a wrapped ring are exercised
        models = dict(models, gemma=make_test_model("gemma3_text", tmp_path / "gemma", 320))
        env = {"SARAGOSSA_CHUNK": "8"}
    with serve(models, [model], ["--no-prefix-cache"], env=env) as off:
        cold, reused_off = conversation(off, model, interleave=False)
    assert reused_off == 0
    with serve(models, [model], env=env) as on:
        warm, reused_on = conversation(on, model, interleave=True)
        live, _ = conversation(on, model, interleave=False)
    assert reused_on >= BLOCK
    assert warm == cold
    assert live == cold


def test_hybrid_model_answers_are_identical_with_the_cache_on_and_off(tmp_path):
    m = {"hybrid": make_test_model("qwen3_5_moe_text", tmp_path / "hybrid", 320)}
    with serve(m, ["hybrid"], ["--no-prefix-cache"]) as off:
        cold, _ = conversation(off, "hybrid", interleave=False)
    with serve(m, ["hybrid"]) as on:
        warm, reused = conversation(on, "hybrid", interleave=True)
        live, _ = conversation(on, "hybrid", interleave=False)
    assert reused >= BLOCK
    assert warm == cold
    assert live == cold


def test_env_switch_turns_the_cache_off(models):
    with serve(models, ["qwen"], env={"RETI_SERVE_PREFIX_CACHE": "0"}) as s:
        a1, _, _, _ = chat(s, FIRST, session="x")
        _, reused, _, u = chat(s, turn_two(a1), session="x")
        assert reused == 0 and u.prompt_tokens_details.cached_tokens == 0
        with s.client() as c:
            assert c.get("/health").json()["pool"]["prefix_cache"]["enabled"] is False


def test_anthropic_messages_use_metadata_user_id_and_report_cache_reads(srv):
    import anthropic
    a = anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=KEY, max_retries=0)
    system, user = FIRST[0]["content"], FIRST[1]["content"]
    first = a.messages.create(model="qwen", system=system, messages=[{"role": "user", "content": user}], max_tokens=4,
                              metadata={"user_id": "hank"}, extra_body={"temperature": 0})
    assert first.usage.cache_read_input_tokens == 0
    evict_live_state(srv)
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Spain?"}]
    raw = a.messages.with_raw_response.create(model="qwen", system=system, messages=msgs, max_tokens=4,
                                              metadata={"user_id": "hank"}, extra_body={"temperature": 0})
    second = raw.parse()
    assert second.usage.cache_read_input_tokens >= BLOCK
    assert int(raw.headers["x-saragossa-reused-prefix-tokens"]) == second.usage.cache_read_input_tokens
    other = a.messages.create(model="qwen", system=system, messages=msgs, max_tokens=4,
                              metadata={"user_id": "ivy"}, extra_body={"temperature": 0})
    assert other.usage.cache_read_input_tokens == 0
