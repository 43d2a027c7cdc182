"""The include order of src/server/ (docs/development.md): no circles, and every file includes only
headers below it (tools/include_order.py). The checker itself is shown to fail on a circle and on
an include that goes up."""
import shutil
import subprocess
import sys

from conftest import ROOT

TOOL = str(ROOT / "tools" / "include_order.py")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)


def test_server_files_include_each_other_downward_only():
    r = run("src/server")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no circles, every include downward" in r.stdout


def copy_server(tmp_path):
    shutil.copytree(ROOT / "src" / "server", tmp_path / "src" / "server")
    return tmp_path / "src" / "server"


def add_include(path, header):
    text = path.read_text()
    path.write_text(text.replace("#include", f'#include "server/{header}"\n#include', 1))


def test_checker_names_a_circle(tmp_path):
    srv = copy_server(tmp_path)
    add_include(srv / "pool.c", "routes_openai.h")  # routes_openai.h includes pool.h: a circle
    r = run("--root", str(tmp_path), "src/server")
    assert r.returncode == 1
    assert "circle" in r.stdout and "pool.c includes routes_openai.h" in r.stdout, r.stdout


def test_checker_names_an_upward_include(tmp_path):
    srv = copy_server(tmp_path)
    add_include(srv / "memguard.c", "job.h")  # no circle (job.h does not lead back to memguard), but upward
    r = run("--root", str(tmp_path), "src/server")
    assert r.returncode == 1
    assert "circle" not in r.stdout
    assert "memguard.c includes job.h, which is not below memguard" in r.stdout, r.stdout
