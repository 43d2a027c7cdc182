"""The Makefile's defaults, read from `make -pnq` (its variables, nothing built): every core
compiles unless a -jN is given, CUDA=auto builds the CUDA backend only where a GPU is visible, and
CUDA_ARCHS picks the GPUs the kernels are compiled for and is checked. NVCC=/bin/true stands in for
the CUDA toolkit, so these run the same with and without one."""
import os
import re
import subprocess

import pytest

from conftest import ROOT


def make_vars(*args, env_extra=None):
    """`make -pnq ARGS` as a top-level make run by a user: {name: value} of its variables."""
    # a make that runs this test exports its command line's variables (CI's CUDA=1 CUDA_ARCHS=...)
    # into the environment: the knobs under test start from their defaults here
    knobs = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "JOBS", "CUDA", "CUDA_ARCHS", "NVCC", "NVCCFLAGS",
             "CUDA_HOME", "CUDA_TRACE", "SAN", "NATIVE", "DEBUG", "BUILD")
    env = {k: v for k, v in os.environ.items() if k not in knobs}
    env.update(env_extra or {})
    env["SARAGOSSA_SKIP_DEPS"] = "1"  # reading the variables must not install anything
    p = subprocess.run(["make", "-pnq", *args, "all"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    out = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*) :?= ?(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return p, out


def gpu_visible():
    if any(re.fullmatch(r"nvidia\d+", d) for d in os.listdir("/dev")):
        return True
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_make_compiles_on_every_core_unless_told_otherwise():
    cores = len(os.sched_getaffinity(0))
    _, v = make_vars()
    assert f"-j{cores}" in v["MAKEFLAGS"].split(), v["MAKEFLAGS"]
    _, v = make_vars("-j1")
    assert "-j1" in v["MAKEFLAGS"].split() and f"-j{cores}" not in v["MAKEFLAGS"].split() or cores == 1, v["MAKEFLAGS"]
    _, v = make_vars("JOBS=3")
    assert "-j3" in v["MAKEFLAGS"].split(), v["MAKEFLAGS"]
    _, v = make_vars(env_extra={"JOBS": "some other tool's"})  # only the command line's JOBS counts
    assert f"-j{cores}" in v["MAKEFLAGS"].split(), v["MAKEFLAGS"]


@pytest.mark.skipif(gpu_visible(), reason="a GPU is visible here: CUDA=auto builds CUDA, as it should")
def test_cuda_auto_with_nvcc_but_no_gpu_skips_the_kernels():
    _, v = make_vars("NVCC=/bin/true")
    assert v["CUDA_ON"] == "0"
    _, v = make_vars("NVCC=/bin/true", "CUDA=1")  # a build host for GPU machines, or CI
    assert v["CUDA_ON"] == "1"


def test_cuda_archs_default_and_list():
    _, v = make_vars("NVCC=/bin/true", "CUDA=1")
    assert v["CUDA_GENCODE"].split() == ["-gencode", "'arch=compute_90,code=[sm_90,compute_90]'"]
    _, v = make_vars("NVCC=/bin/true", "CUDA=1", "CUDA_ARCHS=120 90 100")
    assert v["CUDA_GENCODE"].split() == [
        "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_100,code=sm_100",
        "-gencode", "'arch=compute_120,code=[sm_120,compute_120]'"]  # machine code for each, PTX of the newest
    assert "$(CUDA_GENCODE)" in v["NVCCFLAGS"]  # what the .cu rule compiles with


@pytest.mark.parametrize("archs", ["80 90", "sm_90", "", "9x"])
def test_cuda_archs_the_kernels_cannot_build_for_are_refused(archs):
    p, _ = make_vars("NVCC=/bin/true", "CUDA=1", f"CUDA_ARCHS={archs}")
    assert p.returncode != 0
    assert f"CUDA_ARCHS is a list of compute capabilities, 90 or higher (the kernels use sm_90 instructions), got " \
           f"'{archs}'" in p.stderr, p.stderr
