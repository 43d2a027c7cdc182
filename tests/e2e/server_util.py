"""Starting a real `saragossa serve` process for the server tests, and a tiny tokenizer + chat
template for the fixture models (which ship without one)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key-0123456789"


def saragossa_bin():
    return os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A serve process. Use as a context manager; .client() gives an httpx client."""

    def __init__(self, *args, socket_path=None, port=None, key=None, env=None, wait=True):
        self.tmp = tempfile.mkdtemp(prefix="sg-serve-")
        self.socket = socket_path
        self.port = port
        self.key = key
        cmd = [saragossa_bin(), "serve"]
        if socket_path:
            cmd += ["--socket", socket_path]
        if port:
            cmd += ["--port", str(port)]
        if key:
            cmd += ["--api-key", key]
        cmd += list(args)
        e = dict(os.environ)
        e.pop("SARAGOSSA_API_KEY", None)
        e["SARAGOSSA_LOG"] = e.get("SARAGOSSA_LOG", "warn")
        if env:
            e.update(env)
        self.log = open(os.path.join(self.tmp, "stderr"), "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=e)
        if wait:
            self.wait_ready()

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.stderr()}")
            try:
                with self.client(timeout=1) as c:
                    if c.get("/health").status_code == 200:
                        return
            except (httpx.TransportError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError("serve did not come up: " + self.stderr())

    def base_url(self):
        return f"http://127.0.0.1:{self.port}" if self.port and not self.socket else "http://sg"

    def client(self, timeout=60, auth=True):
        headers = {"Authorization": f"Bearer {self.key}"} if (self.key and auth) else {}
        if self.socket:
            transport = httpx.HTTPTransport(uds=self.socket)
            return httpx.Client(transport=transport, base_url="http://sg", timeout=timeout, headers=headers)
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=timeout, headers=headers)

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is not None and self.proc.returncode != 0:
            print(f"serve exited with {self.proc.returncode}:\n{self.stderr()[-6000:]}")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CORPUS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Paris is the capital of France.",
    "user assistant system: answer briefly and clearly, please.",
    "0123456789 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" the and of to in is it",
] * 20


def make_test_model(fixture, dest, vocab_size):
    """Copies a fixture model folder to dest and adds a byte-level BPE tokenizer of at most
    vocab_size ids (trained here with the `tokenizers` package) and a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    src = ROOT / "tests" / "fixtures" / fixture
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(src / f, dest / f)
    specials = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() <= vocab_size
    tok.save(str(dest / "tokenizer.json"))
    import json
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "<|im_end|>",
        "chat_template": CHATML, "add_bos_token": False}))
    return dest


def make_embed_model(dest):
    """An embedding model for the server tests: the tiny random BERT fixture (vocabulary 320, at
    most 64 tokens, mean pooling) with the cross-encoder fixture's WordPiece tokenizer (162 ids,
    all inside the BERT's vocabulary), so it embeds text."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(ROOT / "tests" / "fixtures" / "bert" / f, dest / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "tests" / "fixtures" / "cross_encoder" / f, dest / f)
    return dest
