#!/usr/bin/env python3
"""Checks the CUDA kernels for global loads that ptxas moved above griddepcontrol.wait.

A kernel launched with programmatic dependent launch may start while the kernel before it still
runs; what it loads before its griddepcontrol.wait (PDL's wait) must not be written by an earlier
kernel. The source puts only weight loads there. ptxas, though, may move a load it takes for one of
invariant data (ld.global.nc: __ldg, or a const __restrict__ pointer) above the wait. For every
kernel with a wait, this counts the global loads before the first wait in the PTX (what the source
asked for) and in the SASS (what runs); a kernel with more in the SASS has a load moved above the
wait, and the script exits 1. It compiles with the build's NVCCFLAGS (asked of make) and needs nvcc
and cuobjdump (the CUDA toolkit's binary utilities).

  tools/pdl_audit.py [--nvcc NVCC] [-j N] src/backend/cuda/*.cu
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTX_LOAD = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld\.global|ld\.(?!param|shared|local|const)[a-z]|cp\.async|cp\.reduce\.async\.bulk)", re.M)
SASS_LOAD = re.compile(r"\b(LDG|LDGSTS|UBLKCP|UTMALDG|LD)(\.|\s)")


def ptx_counts(ptx):
    """{kernel: loads before its first griddepcontrol.wait} for the kernels with a wait"""
    out = {}
    for m in re.finditer(r"\.entry\s+(\S+?)\s*\(", ptx):
        name, start = m.group(1), m.end()
        end = ptx.find(".entry", start)
        body = ptx[start:end if end > 0 else len(ptx)]
        w = body.find("griddepcontrol.wait")
        if w >= 0:
            out[name] = len(PTX_LOAD.findall(body[:w]))
    return out


def sass_counts(sass):
    out = {}
    for part in re.split(r"^\s*Function : ", sass, flags=re.M)[1:]:
        name, body = part.split("\n", 1)
        lines = body.split("\n")
        w = next((i for i, l in enumerate(lines) if "ACQBULK" in l), None)
        if w is not None:
            out[name.strip()] = sum(1 for l in lines[:w] if SASS_LOAD.search(l.split(";")[0]))
    return out


def nvcc_flags():
    """the Makefile's NVCCFLAGS, so that the audit compiles what the build compiles"""
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "CUDA=1", "--eval", "pdl-audit-flags: ; @echo $(NVCCFLAGS)",
                        "pdl-audit-flags"], capture_output=True, text=True)
    if r.returncode or not r.stdout.strip():
        raise RuntimeError("make could not print NVCCFLAGS: " + (r.stderr.strip() or "no output"))
    return r.stdout.split()


def audit(src, nvcc, cuobjdump, flags, tmp):
    """(src, PTX counts, SASS counts), or (src, error message, None)"""
    base = os.path.join(tmp, os.path.basename(src))
    cmd = [nvcc] + flags + ["-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src"), "-DSG_CUDA=1"]
    for c in (cmd + ["-ptx", src, "-o", base + ".ptx"], cmd + ["-cubin", src, "-o", base + ".cubin"], [cuobjdump, "-sass", base + ".cubin"]):
        r = subprocess.run(c, capture_output=True, text=True)
        if r.returncode:
            return src, f"{os.path.basename(c[0])} failed: {r.stderr.strip()[-2000:]}", None
    with open(base + ".ptx") as f:
        p = ptx_counts(f.read())
    return src, p, sass_counts(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="+")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--cuobjdump", default=None)
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    cuobjdump = a.cuobjdump or shutil.which("cuobjdump") or os.path.join(os.path.dirname(a.nvcc), "cuobjdump")
    missing = [t for t in (a.nvcc, cuobjdump) if not os.access(t, os.X_OK)]
    if missing:
        print(f"pdl_audit: {' and '.join(missing)} not found (the CUDA toolkit's nvcc and cuobjdump are needed)", file=sys.stderr)
        return 2
    try:
        flags = nvcc_flags()
    except (RuntimeError, OSError) as e:
        print(f"pdl_audit: {e}", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        for src, p, s in ex.map(lambda f: audit(f, a.nvcc, cuobjdump, flags, tmp), a.sources):
            if s is None:
                print(f"pdl_audit: {src}: {p}", file=sys.stderr)
                return 2
            for name in sorted(p):
                if name not in s:
                    print(f"{src}: {name}: in the PTX, not in the SASS", file=sys.stderr)
                    bad += 1
                elif s[name] > p[name]:
                    print(f"{src}: {name}: {s[name]} loads before the wait in the SASS, {p[name]} in the PTX")
                    bad += 1
            print(f"{src}: {len(p)} kernels with a wait checked")
    print("pdl_audit: " + (f"{bad} kernels with a load moved above the wait" if bad else "no load moved above the wait"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
