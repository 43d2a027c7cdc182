"""Model downloads from a Hugging Face hub: pull, list, rm.

A local HTTP server (127.0.0.1, random port) speaks the endpoints of the hub that saragossa and
huggingface_hub use, backed by small fixture repos made here. HF_ENDPOINT points at it and
HF_HUB_CACHE at a temporary folder. The cache saragossa writes is checked with the real
huggingface_hub package (local_files_only loads, scan_cache_dir) and against the layout
huggingface_hub itself writes when it downloads the same files from the same server.
"""
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GGUF_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
LFS = {"model.safetensors", "tokenizer.json"}


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tiny_repo():
    rng = np.random.default_rng(0)
    tensors = {"embed.weight": rng.standard_normal((256, 128), dtype=np.float32),
               "norm.weight": np.ones(128, dtype=np.float32)}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "vocab_size": 256, "torch_dtype": "float32"}
    tok = {"version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(256)}, "merges": []}}
    return {
        "config.json": json.dumps(config).encode(),
        "tokenizer.json": json.dumps(tok).encode(),
        "tokenizer_config.json": b'{"bos_token": "<s>"}',
        "model.safetensors": save(tensors),
        "README.md": b"# tiny\n",                      # not needed: never fetched
        "pytorch_model.bin": b"\0" * 1000,            # not needed: never fetched
        "onnx/model.onnx": b"\0" * 100,               # not needed: never fetched
    }


class Repo:
    def __init__(self, files, commit=COMMIT, lfs=LFS, gated_token=None, lie_sha=()):
        self.files, self.commit, self.lfs = files, commit, set(lfs)
        self.gated_token = gated_token  # None: public; else the token that opens it
        self.lie_sha = set(lie_sha)     # files whose advertised SHA-256 is wrong

    def sha256(self, name):
        if name in self.lie_sha:
            return hashlib.sha256(b"not the content").hexdigest()
        return hashlib.sha256(self.files[name]).hexdigest()


class FakeHub:
    """The hub endpoints: model info, resolve (HEAD/GET, LFS files redirected to a CDN path) and a
    CDN with Range support. Records every request; can cut a CDN transfer midway."""

    def __init__(self):
        self.repos = {}
        self.blobs = {}         # advertised sha256 -> bytes
        self.cuts = {}          # advertised sha256 -> how many GETs to cut midway
        self.log = []
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # LFS files are redirected to another host name, as the real hub sends them to a CDN.
        self.cdn_url = f"http://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def add(self, repo_id, repo):
        self.repos[repo_id] = repo
        for name in repo.lfs:
            if name in repo.files:
                self.blobs[repo.sha256(name)] = repo.files[name]

    def requests(self, kind=None):
        with self.lock:
            return [r for r in self.log if kind is None or r["kind"] == kind]

    def clear(self):
        with self.lock:
            self.log.clear()

    def reply(self, h, status, headers=(), body=b"", head=False):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def refuse(self, h, repo, head):
        tok = h.headers.get("Authorization")
        if repo.gated_token is not None and tok != f"Bearer {repo.gated_token}":
            self.reply(h, 401, [("X-Error-Code", "GatedRepo"), ("X-Error-Message", "Access to model is restricted.")],
                       b'{"error":"gated"}', head)
            return True
        return False

    def handle(self, h, head):
        path = h.path.split("?")[0]
        m_api = re.fullmatch(r"/api/models/([^/]+)/([^/]+)/revision/(.+)", path)
        m_res = re.fullmatch(r"/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)", path)
        m_cdn = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        kind = "api" if m_api else "resolve" if m_res else "cdn" if m_cdn else "other"
        with self.lock:
            self.log.append({"kind": kind, "method": "HEAD" if head else "GET", "path": path,
                             "range": h.headers.get("Range"), "auth": h.headers.get("Authorization")})
        from urllib.parse import unquote
        if m_api:
            repo = self.repos.get(f"{m_api[1]}/{m_api[2]}")
            if repo is None:
                return self.reply(h, 404, [("X-Error-Code", "RepoNotFound")], b'{"error":"not found"}', head)
            # Like the real hub, a gated repo's model info is public; its files are not.
            if m_api[3] not in ("main", repo.commit):
                return self.reply(h, 404, [("X-Error-Code", "RevisionNotFound")], b"", head)
            info = {"id": f"{m_api[1]}/{m_api[2]}", "sha": repo.commit,
                    "siblings": [{"rfilename": n} for n in repo.files]}
            return self.reply(h, 200, [("Content-Type", "application/json")], json.dumps(info).encode(), head)
        if m_res:
            repo = self.repos.get(f"{m_res[1]}/{m_res[2]}")
            name = unquote(m_res[4])
            if repo is None:
                return self.reply(h, 404, [("X-Error-Code", "RepoNotFound")], b"", head)
            if self.refuse(h, repo, head):
                return
            if m_res[3] not in ("main", repo.commit):
                return self.reply(h, 404, [("X-Error-Code", "RevisionNotFound")], b"", head)
            if name not in repo.files:
                return self.reply(h, 404, [("X-Error-Code", "EntryNotFound")], b"", head)
            data = repo.files[name]
            common = [("X-Repo-Commit", repo.commit)]
            if name in repo.lfs:
                sha = repo.sha256(name)
                return self.reply(h, 302, common + [
                    ("ETag", f'"{git_sha1(b"pointer " + data)}"'),
                    ("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data))),
                    ("Location", f"{self.cdn_url}/cdn/{sha}")], b"", head)
            h.send_response(200)
            for k, v in common + [("ETag", f'"{git_sha1(data)}"'), ("Content-Length", str(len(data)))]:
                h.send_header(k, v)
            h.end_headers()
            if not head:
                h.wfile.write(data)
            return
        if m_cdn:
            data = self.blobs.get(m_cdn[1])
            if data is None:
                return self.reply(h, 404, [], b"", head)
            start = 0
            rng = h.headers.get("Range")
            if rng:
                start = int(re.fullmatch(r"bytes=(\d+)-", rng)[1])
                h.send_response(206)
                h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                h.send_response(200)
            body = data[start:]
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if head:
                return
            with self.lock:
                cut = self.cuts.get(m_cdn[1], 0)
                if cut:
                    self.cuts[m_cdn[1]] = cut - 1
            if cut:
                h.wfile.write(body[: len(body) // 2])
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)
                return
            h.wfile.write(body)
            return
        self.reply(h, 404, [], b"", head)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub():
    h = FakeHub()
    h.add("org/tiny", Repo(tiny_repo()))
    gguf = {"tiny-Q8_0.gguf": b"GGUF" + b"\x08" * 3000, "tiny-Q4_K_M.gguf": b"GGUF" + b"\x04" * 2000,
            "tiny-F16.gguf": b"GGUF" + b"\x10" * 5000, "mmproj-tiny-Q4_K_M.gguf": b"GGUF" + b"\x01" * 500,
            "README.md": b"# gguf\n"}
    h.add("org/tiny-gguf", Repo(gguf, commit=GGUF_COMMIT, lfs={n for n in gguf if n.endswith(".gguf")}))
    h.add("org/corrupt", Repo(tiny_repo(), lie_sha={"model.safetensors"}))
    h.add("org/gated", Repo(tiny_repo(), gated_token="hf_secret"))
    split = {"big-Q8_0.gguf": b"GGUF" + b"8" * 300, "Q4_K_M/big-Q4_K_M-00002-of-00002.gguf": b"part2",
             "Q4_K_M/big-Q4_K_M-00001-of-00002.gguf": b"GGUF part1", "Q5_K_M/big-Q5_K_M-00001-of-00001.gguf": b"GGUF"}
    h.add("org/split", Repo(split, lfs=set(split)))
    evil = {"../../evil-Q4_K_M.gguf": b"GGUF" + b"x" * 100}
    h.add("org/evil", Repo(evil, lfs=set(evil)))
    yield h
    h.close()


@pytest.fixture
def env(tmp_path, hub):
    return {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "hf-home"),
            "HF_TOKEN": "", "HF_HUB_OFFLINE": "0", "SARAGOSSA_CACHE_DIR": str(tmp_path / "sg"),
            "SARAGOSSA_HUB_RETRIES": "3"}


def repo_dir(env, repo_id):
    org, name = repo_id.split("/")
    return Path(env["HF_HUB_CACHE"]) / f"models--{org}--{name}"


NEEDED = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_pull_downloads_only_needed_files_verified_in_hf_layout(sg, hub, env):
    r = sg("pull", "org/tiny", env=env)
    assert r.returncode == 0, r.stderr
    rd = repo_dir(env, "org/tiny")
    snap = rd / "snapshots" / COMMIT
    assert r.stdout.strip() == str(snap)
    assert sorted(p.name for p in snap.iterdir()) == NEEDED
    files = hub.repos["org/tiny"].files
    for name in NEEDED:
        link = snap / name
        assert link.is_symlink()
        etag = hashlib.sha256(files[name]).hexdigest() if name in LFS else git_sha1(files[name])
        assert os.readlink(link) == f"../../blobs/{etag}"
        assert link.read_bytes() == files[name]
    assert (rd / "refs" / "main").read_text() == COMMIT
    assert not list((rd / "blobs").glob("*.incomplete"))
    loaded = load_file(snap / "model.safetensors")
    assert np.array_equal(loaded["embed.weight"], np.random.default_rng(0).standard_normal((256, 128), dtype=np.float32))
    fetched = {r["path"].rsplit("/", 1)[-1] for r in hub.requests("resolve")}
    assert fetched == set(NEEDED)  # README.md, pytorch_model.bin, onnx/ never asked for
    assert "pulled org/tiny" in r.stderr


HF_CHECK = r"""
import json, sys
from huggingface_hub import hf_hub_download, scan_cache_dir
cache, repo, files = sys.argv[1], sys.argv[2], sys.argv[3:]
out = {"paths": {f: hf_hub_download(repo, f, cache_dir=cache, local_files_only=True) for f in files}}
info = scan_cache_dir(cache)
out["warnings"] = [str(w) for w in info.warnings]
out["repos"] = [{"id": r.repo_id, "size": r.size_on_disk, "files": sorted(f.file_name for rev in r.revisions for f in rev.files),
                 "refs": sorted(ref for rev in r.revisions for ref in rev.refs)} for r in info.repos]
print(json.dumps(out))
"""


def run_py(code, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_huggingface_hub_recognises_the_cache(sg, hub, env):
    assert sg("pull", "org/tiny", env=env).returncode == 0
    offline = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    out = run_py(HF_CHECK, env["HF_HUB_CACHE"], "org/tiny", *NEEDED, env=offline)
    snap = repo_dir(env, "org/tiny") / "snapshots" / COMMIT
    for name in NEEDED:
        assert out["paths"][name] == str(snap / name)
        assert Path(out["paths"][name]).read_bytes() == hub.repos["org/tiny"].files[name]
    assert out["warnings"] == []
    [repo] = out["repos"]
    assert repo["id"] == "org/tiny" and repo["files"] == NEEDED and repo["refs"] == ["main"]
    assert repo["size"] == sum(len(hub.repos["org/tiny"].files[n]) for n in NEEDED)


HF_DOWNLOAD = r"""
import json, sys
from huggingface_hub import hf_hub_download
cache, repo, files = sys.argv[1], sys.argv[2], sys.argv[3:]
print(json.dumps([hf_hub_download(repo, f, cache_dir=cache) for f in files]))
"""


def tree(root):
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = ("link", os.readlink(p)) if p.is_symlink() else ("dir",) if p.is_dir() else ("file", p.read_bytes())
    return out


def test_layout_is_what_huggingface_hub_writes(sg, hub, env, tmp_path):
    """huggingface_hub downloads the same files from the same server: the two trees match."""
    assert sg("pull", "org/tiny", env=env).returncode == 0
    theirs = tmp_path / "hf-own"
    run_py(HF_DOWNLOAD, str(theirs), "org/tiny", *NEEDED, env={"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"})
    assert tree(repo_dir(env, "org/tiny")) == tree(theirs / "models--org--tiny")


def test_models_downloaded_by_huggingface_hub_are_found_offline(sg, hub, env, tmp_path):
    theirs = tmp_path / "hf-own"
    run_py(HF_DOWNLOAD, str(theirs), "org/tiny", *NEEDED, env={"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"})
    hub.clear()
    r = sg("pull", "org/tiny", env={**env, "HF_HUB_CACHE": str(theirs), "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(theirs / "models--org--tiny" / "snapshots" / COMMIT)
    assert hub.requests() == []
    listed = sg("list", env={**env, "HF_HUB_CACHE": str(theirs)})
    assert re.search(r"^org/tiny\s+safetensors\s+f32\s", listed.stdout, re.M)


def test_revisions_pin_a_commit_or_fail_clearly(sg, hub, env):
    r = sg("pull", f"org/tiny@{COMMIT}", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"/snapshots/{COMMIT}")
    assert not (repo_dir(env, "org/tiny") / "refs").exists()  # a commit is not a ref
    bad = sg("pull", "org/tiny@nope", env=env)
    assert bad.returncode == 1 and "revision 'nope' not found" in bad.stderr
    missing = sg("pull", "org/absent", env=env)
    assert missing.returncode == 1 and "repository not found" in missing.stderr


def test_pull_resumes_a_cut_download_with_range(sg, hub, env):
    sha = hashlib.sha256(hub.repos["org/tiny"].files["model.safetensors"]).hexdigest()
    size = len(hub.repos["org/tiny"].files["model.safetensors"])
    hub.cuts[sha] = 1
    r = sg("pull", "org/tiny", env={**env, "SARAGOSSA_HUB_RETRIES": "0"})
    assert r.returncode == 1
    assert "interrupted" in r.stderr and "run the same command again to resume" in r.stderr
    rd = repo_dir(env, "org/tiny")
    part = rd / "blobs" / f"{sha}.incomplete"
    assert 0 < part.stat().st_size < size
    assert not (rd / "snapshots" / COMMIT).exists()
    have = part.stat().st_size
    hub.clear()
    r = sg("pull", "org/tiny", env=env)
    assert r.returncode == 0, r.stderr
    cdn = [q for q in hub.requests("cdn") if q["method"] == "GET"]
    assert [q["range"] for q in cdn] == [f"bytes={have}-"]
    assert (rd / "snapshots" / COMMIT / "model.safetensors").read_bytes() == hub.repos["org/tiny"].files["model.safetensors"]
    assert not part.exists()


def test_pull_retries_a_cut_transfer_within_one_run(sg, hub, env):
    sha = hashlib.sha256(hub.repos["org/tiny"].files["model.safetensors"]).hexdigest()
    hub.cuts[sha] = 1
    r = sg("pull", "org/tiny", env=env)
    assert r.returncode == 0, r.stderr
    ranges = [q["range"] for q in hub.requests("cdn") if q["method"] == "GET" and q["path"].endswith(sha)]
    assert ranges[0] is None and re.fullmatch(r"bytes=\d+-", ranges[1] or "")
    snap = repo_dir(env, "org/tiny") / "snapshots" / COMMIT
    assert (snap / "model.safetensors").read_bytes() == hub.repos["org/tiny"].files["model.safetensors"]


def test_file_with_wrong_sha256_is_rejected(sg, hub, env):
    r = sg("pull", "org/corrupt", env=env)
    assert r.returncode == 1
    assert "model.safetensors is corrupt" in r.stderr and "SHA-256" in r.stderr
    rd = repo_dir(env, "org/corrupt")
    snaps = rd / "snapshots"
    assert not snaps.exists() or list(snaps.iterdir()) == []
    advertised = hub.repos["org/corrupt"].sha256("model.safetensors")
    assert not (rd / "blobs" / advertised).exists()
    assert not list((rd / "blobs").glob("*.incomplete"))
    assert not (rd / "refs" / "main").exists()


def test_gated_repo_says_accept_licence_and_export_token(sg, hub, env):
    r = sg("pull", "org/gated", env=env)
    assert r.returncode == 1
    assert "accept its licence" in r.stderr and "export HF_TOKEN" in r.stderr
    assert f"{hub.url}/org/gated" in r.stderr


def test_hf_token_is_sent_as_bearer(sg, hub, env):
    r = sg("pull", "org/gated", env={**env, "HF_TOKEN": "hf_secret"})
    assert r.returncode == 0, r.stderr
    hub_reqs = [q for q in hub.requests() if q["kind"] in ("api", "resolve")]
    assert hub_reqs and all(q["auth"] == "Bearer hf_secret" for q in hub_reqs)
    wrong = sg("pull", "org/gated", env={**env, "HF_TOKEN": "hf_wrong", "HF_HUB_CACHE": env["HF_HUB_CACHE"] + "2"})
    assert wrong.returncode == 1 and "HF_TOKEN" in wrong.stderr


def test_token_file_is_used_when_hf_token_is_unset(sg, hub, env):
    home = Path(env["HF_HOME"])
    home.mkdir(parents=True)
    (home / "token").write_text("hf_secret\n")
    e = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    binary = os.environ.get("SARAGOSSA_BIN") or str(Path(__file__).resolve().parents[2] / "build" / "saragossa")
    r = subprocess.run([binary, "pull", "-q", "org/gated"],
                       env={**{k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}, **e},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_hub_gives_a_clear_error(sg, env):
    r = sg("pull", "org/tiny", env={**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"})
    assert r.returncode == 1
    assert "org/tiny is not in the local cache and the hub is unreachable:" in r.stderr


def test_cached_model_is_used_when_the_hub_is_unreachable(sg, env):
    first = sg("pull", "org/tiny", env=env)
    assert first.returncode == 0
    r = sg("pull", "org/tiny", env={**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == first.stdout
    assert "using the cached copy" in r.stderr


def test_second_pull_downloads_nothing(sg, hub, env):
    assert sg("pull", "org/tiny", env=env).returncode == 0
    hub.clear()
    r = sg("pull", "org/tiny", env=env)
    assert r.returncode == 0, r.stderr
    assert hub.requests("resolve") == [] and hub.requests("cdn") == []
    assert "up to date" in r.stderr


def test_gguf_repo_fetches_the_default_quant_only(sg, hub, env):
    r = sg("pull", "org/tiny-gguf", env=env)
    assert r.returncode == 0, r.stderr
    snap = repo_dir(env, "org/tiny-gguf") / "snapshots" / GGUF_COMMIT
    assert r.stdout.strip() == str(snap / "tiny-Q4_K_M.gguf")
    assert sorted(p.name for p in snap.iterdir()) == ["tiny-Q4_K_M.gguf"]


def test_gguf_file_and_quant_tag_pick_that_file(sg, hub, env):
    r = sg("pull", "org/tiny-gguf:tiny-F16.gguf", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("/tiny-F16.gguf")
    r = sg("pull", "org/tiny-gguf:q8_0", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("/tiny-Q8_0.gguf")
    missing = sg("pull", "org/tiny-gguf:tiny-Q2_K.gguf", env=env)
    assert missing.returncode == 1
    assert "no file named 'tiny-Q2_K.gguf'" in missing.stderr and "tiny-Q4_K_M.gguf" in missing.stderr


def test_split_gguf_comes_with_all_its_parts(sg, hub, env):
    r = sg("pull", "org/split", env=env)
    assert r.returncode == 0, r.stderr
    snap = repo_dir(env, "org/split") / "snapshots" / COMMIT
    assert r.stdout.strip() == str(snap / "Q4_K_M" / "big-Q4_K_M-00001-of-00002.gguf")
    assert sorted(str(p.relative_to(snap)) for p in snap.rglob("*.gguf")) == [
        "Q4_K_M/big-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/big-Q4_K_M-00002-of-00002.gguf"]
    assert os.readlink(snap / "Q4_K_M" / "big-Q4_K_M-00002-of-00002.gguf").startswith("../../../blobs/")
    assert (snap / "Q4_K_M" / "big-Q4_K_M-00002-of-00002.gguf").read_bytes() == b"part2"


def test_unsafe_file_name_from_the_hub_is_refused(sg, hub, env, tmp_path):
    r = sg("pull", "org/evil", env=env)
    assert r.returncode == 1
    assert "unsafe" in r.stderr
    assert not list(tmp_path.rglob("evil-Q4_K_M.gguf"))


@pytest.mark.parametrize("bad", ["a/b/c", "org/..", "org/na--me", "org/name:../../x.gguf", "org/name@../x"])
def test_invalid_repo_ids_are_rejected(sg, hub, env, bad):
    r = sg("pull", bad, env=env)
    assert r.returncode == 1
    assert "invalid model name" in r.stderr or "invalid revision" in r.stderr
    assert hub.requests() == []


def test_unknown_plain_name_suggests_list(sg, env):
    r = sg("pull", "no-such-model", env=env)
    assert r.returncode == 1
    assert "unknown model 'no-such-model'" in r.stderr and "saragossa list" in r.stderr


def test_list_shows_pulled_models_with_format_quant_and_size(sg, hub, env):
    assert sg("pull", "org/tiny", env=env).returncode == 0
    assert sg("pull", "org/tiny-gguf", env=env).returncode == 0
    own = Path(env["SARAGOSSA_CACHE_DIR"]) / "models"
    own.mkdir(parents=True)
    (own / "mine-Q8_0.gguf").write_bytes(b"GGUF" + b"\0" * 96)
    r = sg("list", env=env)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
    assert rows["org/tiny"][:2] == ["safetensors", "f32"]
    assert rows["org/tiny-gguf:tiny-Q4_K_M.gguf"][:2] == ["gguf", "Q4_K_M"]
    assert rows["mine-Q8_0.gguf"][:2] == ["gguf", "Q8_0"]
    js = json.loads(sg("list", "--json", env=env).stdout)
    by = {e["name"]: e for e in js}
    files = hub.repos["org/tiny"].files
    assert by["org/tiny"]["size"] == sum(len(files[n]) for n in NEEDED)
    assert by["mine-Q8_0.gguf"]["size"] == 100 and by["mine-Q8_0.gguf"]["source"] == "saragossa"


def test_rm_removes_a_repo_and_says_so(sg, hub, env):
    assert sg("pull", "org/tiny", env=env).returncode == 0
    r = sg("rm", "org/tiny", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("removed org/tiny")
    assert not repo_dir(env, "org/tiny").exists()
    assert "org/tiny" not in sg("list", env=env).stdout
    again = sg("rm", "org/tiny", env=env)
    assert again.returncode == 1 and "not in the Hugging Face cache" in again.stderr


def test_rm_one_gguf_file_and_an_own_model(sg, hub, env):
    assert sg("pull", "org/tiny-gguf", env=env).returncode == 0
    assert sg("pull", "org/tiny-gguf:Q8_0", env=env).returncode == 0
    r = sg("rm", "org/tiny-gguf:tiny-Q8_0.gguf", env=env)
    assert r.returncode == 0, r.stderr
    snap = repo_dir(env, "org/tiny-gguf") / "snapshots" / GGUF_COMMIT
    assert sorted(p.name for p in snap.iterdir()) == ["tiny-Q4_K_M.gguf"]
    q8 = hashlib.sha256(hub.repos["org/tiny-gguf"].files["tiny-Q8_0.gguf"]).hexdigest()
    assert not (repo_dir(env, "org/tiny-gguf") / "blobs" / q8).exists()
    own = Path(env["SARAGOSSA_CACHE_DIR"]) / "models"
    own.mkdir(parents=True)
    (own / "mine.gguf").write_bytes(b"GGUF")
    r = sg("rm", "mine.gguf", env=env)
    assert r.returncode == 0 and not (own / "mine.gguf").exists()
    assert sg("rm", "/etc/passwd", env=env).returncode == 1
