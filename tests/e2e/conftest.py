"""Shared pytest fixtures: the CLI binary and the repository root."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def saragossa_bin():
    return os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")


@pytest.fixture(scope="session")
def sg():
    """Runs the CLI: sg("doctor") -> CompletedProcess with text stdout/stderr."""
    path = saragossa_bin()
    assert os.access(path, os.X_OK), f"{path} is not built (run make)"

    def run(*args, input=None, env=None, timeout=120):
        e = dict(os.environ)
        if env:
            e.update(env)
        return subprocess.run([path, *args], input=input, capture_output=True, text=True, env=e,
                              timeout=timeout)
    return run


@pytest.fixture(scope="session")
def root():
    return ROOT
