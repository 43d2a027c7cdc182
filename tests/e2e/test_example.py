"""examples/chat.c, the program written against include/saragossa.h alone: on a fixture model with
a tokenizer and a chat template it streams the same greedy reply as `saragossa generate --chat`,
and a bad model path is a one-line error. Also: the programs link to libsaragossa.so, whose
exports are the public header's functions only (checked by `make test`, scripts/exports.sh)."""
import subprocess
from pathlib import Path

import pytest

from conftest import saragossa_bin
from server_util import make_test_model

CHAT = Path(saragossa_bin()).parent / "examples" / "chat"
MESSAGE = "What is the capital of France?"


@pytest.fixture(scope="module")
def chat_bin():
    assert CHAT.exists(), f"{CHAT} is not built (run make)"
    return str(CHAT)


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def model(request, tmp_path_factory):
    vocab = {"qwen3": 384, "llama": 320}[request.param]
    return make_test_model(request.param, tmp_path_factory.mktemp(request.param) / "m", vocab)


def test_example_streams_the_greedy_reply_of_saragossa_generate(chat_bin, sg, model):
    ex = subprocess.run([chat_bin, str(model), MESSAGE, "24"], capture_output=True, timeout=300)
    assert ex.returncode == 0, ex.stderr.decode(errors="replace")
    cli = sg("generate", "--model", str(model), "--prompt", MESSAGE, "--chat", "--temperature", "0",
             "--max-tokens", "24", timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert ex.stdout.decode() == cli.stdout
    assert len(ex.stdout.strip()) > 0
    err = ex.stderr.decode()
    assert "finish: " in err and "generated tokens: " in err, err
    if "finish: length" in err:
        assert "generated tokens: 24" in err, err


def test_example_names_a_missing_model(chat_bin, tmp_path):
    missing = tmp_path / "no-such-model"
    r = subprocess.run([chat_bin, str(missing), MESSAGE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("chat: ") and str(missing) in r.stderr, r.stderr
    assert r.stdout == ""


def test_example_uses_only_exported_functions(chat_bin):
    """The example's sg_ imports are all defined by the shared library it loads."""
    lib = Path(saragossa_bin()).parent / "libsaragossa.so"
    def syms(*args):
        out = subprocess.run(["nm", "-D", *args], capture_output=True, text=True, check=True).stdout
        return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()}
    used = {s for s in syms("--undefined-only", chat_bin) if s.startswith("sg_")}
    assert {"sg_llm_load", "sg_llm_chat_prompt", "sg_llm_tokenize", "sg_llm_generate"} <= used
    assert used <= syms("--defined-only", str(lib))
