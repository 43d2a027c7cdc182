"""The house rules of the source tree that a grep can check (docs/development.md, "The house"):
nothing above src/backend/ knows which backend runs, dependencies between folders point one way
(cli -> server -> engine -> models -> backend, text -> formats, hub, audio -> base), no two modules
include each other, and no source file grows past what one person reads in a sitting. Each check
names the offending file and line, so a failure says what to move where."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# A CUDA header, a call into the CUDA backend, or a build-time test for it.
BACKEND_LEAK = re.compile(r'#\s*include\s*[<"](backend/cuda/|cuda|cublas)|\bsg_cuda_\w+|\bSG_CUDA\b|\bsg_cu_\w+')
MAX_LINES = 1500
INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')
# A folder may include headers of its own level or lower ones, never of a higher one.
LEVEL = {"cli": 7, "server": 6, "engine": 5, "models": 4, "backend": 3, "text": 3,
         "formats": 2, "hub": 2, "audio": 2, "base": 1}


def sources(root=SRC):
    return sorted(p for p in root.rglob("*") if p.suffix in (".c", ".h", ".cu", ".cuh", ".inc"))


def backend_leaks(files):
    """(path, line number, line) of each backend-specific reference outside src/backend/."""
    out = []
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith("src/backend/"):
            continue
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if BACKEND_LEAK.search(line):
                out.append((rel, i, line.strip()))
    return out


def test_nothing_above_the_backend_names_cuda():
    leaks = backend_leaks(sources())
    assert not leaks, "backend internals above src/backend/ (ask the backend's caps or open it by name):\n" + \
        "\n".join(f"{f}:{n}: {l}" for f, n, l in leaks)


def test_the_leak_check_sees_each_kind_of_leak(tmp_path):
    """The grep itself: it must catch a CUDA include, an sg_cuda_ call and an SG_CUDA test, and
    leave a backend-neutral file and src/backend/ alone."""
    root = tmp_path / "src"
    (root / "models").mkdir(parents=True)
    (root / "backend" / "cuda").mkdir(parents=True)
    (root / "models" / "a.c").write_text('#include "backend/cuda/cuda_backend.h"\n')
    (root / "models" / "b.c").write_text("int x(void) { return sg_cuda_is_backend(0); }\n")
    (root / "models" / "c.c").write_text("#if SG_CUDA\n#endif\n")
    (root / "models" / "d.c").write_text('#include "backend/backend.h"\nint y(void) { return 1; }\n')
    (root / "backend" / "cuda" / "e.c").write_text("#if SG_CUDA\nint z = sg_cuda_x();\n#endif\n")
    global ROOT
    saved = ROOT
    ROOT = tmp_path
    try:
        found = {f for f, _, _ in backend_leaks(sources(root))}
    finally:
        ROOT = saved
    assert found == {"src/models/a.c", "src/models/b.c", "src/models/c.c"}


def test_no_source_file_past_the_size_one_reads():
    big = []
    for p in sources():
        n = sum(1 for _ in p.open(errors="replace"))
        if n > MAX_LINES:
            big.append(f"{p.relative_to(ROOT)}: {n} lines")
    assert not big, f"files over {MAX_LINES} lines (split them by concern):\n" + "\n".join(big)


def include_edges(src=SRC):
    """(file relative to src, header relative to src) for each #include of a project header."""
    out = []
    for p in sources(src):
        rel = p.relative_to(src).as_posix()
        for m in INCLUDE.finditer(p.read_text(errors="replace")):
            if (src / m.group(1)).exists():
                out.append((rel, m.group(1)))
    return out


def upward_includes(edges):
    return [(f, h) for f, h in edges
            if LEVEL.get(f.split("/")[0], 0) < LEVEL.get(h.split("/")[0], 0)]


def module_circles(edges):
    """Pairs of modules (a file pair x.c + x.h) that include each other. A module's private
    header (x_int.h, x_internal.h) belongs to the files that share it and is left out."""
    def module(path):
        return path.rsplit(".", 1)[0]

    def private(path):
        return re.search(r"_(int|internal)$", module(path)) is not None

    deps = {}
    for f, h in edges:
        if module(f) != module(h) and not private(f) and not private(h):
            deps.setdefault(module(f), set()).add(module(h))
    return sorted({tuple(sorted((a, b))) for a, bs in deps.items() for b in bs if a in deps.get(b, ())})


def test_folders_depend_downward_only():
    up = upward_includes(include_edges())
    assert not up, "includes of a higher folder's header:\n" + "\n".join(f"src/{f} includes {h}" for f, h in up)


def test_no_two_modules_include_each_other():
    circles = module_circles(include_edges())
    assert not circles, "modules that include each other (move the shared piece below both):\n" + \
        "\n".join(f"{a} <-> {b}" for a, b in circles)


def test_the_include_checks_see_a_circle_and_an_upward_include():
    edges = [("server/a.c", "server/b.h"), ("server/b.c", "server/a.h"), ("engine/x.c", "server/a.h"),
             ("text/t.c", "text/t_int.h"), ("text/t_int.h", "text/t.h"), ("server/a.c", "engine/x.h")]
    assert module_circles(edges) == [("engine/x", "server/a"), ("server/a", "server/b")]
    assert upward_includes(edges) == [("engine/x.c", "server/a.h")]
