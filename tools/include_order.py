#!/usr/bin/env python3
"""Checks that the files of a source folder include each other without circles, and, for the
folders with a declared order (src/server/), only downward.

A module is a file pair (pool.c + pool.h); module A depends on module B when either of A's files
has `#include "<folder>/B.h"`. The check fails, naming the files, when the modules form a circle
or when a module includes one that its layer may not (a module may include only modules of lower
layers). docs/development.md states the order in words.

usage: tools/include_order.py [--root DIR] [FOLDER...]   (default: src/server; FOLDER relative to the
root, the source tree by default)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Who may include whom in src/server/, lowest layer first: a module includes only modules of
# layers below its own.
LAYERS = {
    "src/server": [
        ["server", "memguard", "request", "model", "metrics", "web", "listen"],  # options, the guard, parsed requests, served models; /metrics' counters, the chat page, the Unix socket
        ["agent", "pool", "multipart"],              # constraints/reasoning/tool calls; the model pool; form bodies
        ["job"],                                     # a job and the worker's queue
        ["response"],                                # shared response builders
        ["routes_speech"],                           # /v1/audio/speech: its parser, the voice rule, the worker
        ["routes_chat_voice"],                       # spoken chat answers (the chat route's audio output)
        ["routes_openai", "routes_ollama", "routes_anthropic", "routes_audio", "routes_embed", "routes_manage"],  # one file per API (embed: its routes; manage: Ollama's pull/delete/copy)
        ["routes_responses"],                        # OpenAI's Responses API, over the chat route's parser
        ["routes", "http_raw"],                      # which API parses and answers a route; raw answers, header checks
        ["http", "auth"],                            # HTTP, listeners, dispatch
    ],
}


def graph(folder, rel):
    """{module: {module it includes: file that includes it}} for folder's own headers (included as
    "<rel without src/>/name.h")."""
    inc = re.compile(r'^\s*#\s*include\s+"' + re.escape(rel.split("/", 1)[1] if rel.startswith("src/") else rel)
                     + r'/([A-Za-z0-9_]+)\.h"', re.M)
    g = {}
    for f in sorted(folder.glob("*.[ch]")):
        mod = f.stem
        deps = g.setdefault(mod, {})
        for m in inc.finditer(f.read_text(errors="replace")):
            if m.group(1) != mod:
                deps.setdefault(m.group(1), f.name)
    return g


def cycles(g):
    """The circles of g, each a list of modules (Tarjan's strongly connected components)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def check(root, rel):
    g = graph(root / rel, rel)
    errors = []
    for comp in cycles(g):
        edges = [f"{g[a][b]} includes {b}.h" for a in comp for b in g[a] if b in comp]
        errors.append(f"{rel}: circle {' <-> '.join(comp)}: " + "; ".join(edges))
    layers = LAYERS.get(rel)
    if layers:
        layer = {m: i for i, ms in enumerate(layers) for m in ms}
        for mod, deps in sorted(g.items()):
            if mod not in layer:
                errors.append(f"{rel}: {mod} has no layer in tools/include_order.py (and docs/development.md)")
                continue
            for dep, f in sorted(deps.items()):
                if dep in layer and layer[dep] >= layer[mod]:
                    errors.append(f"{rel}: {f} includes {dep}.h, which is not below {mod} in the include order")
    return errors


def main(argv):
    root = ROOT
    if argv[:1] == ["--root"] and len(argv) > 1:
        root, argv = pathlib.Path(argv[1]), argv[2:]
    folders = [a.rstrip("/") for a in argv] or ["src/server"]
    errors = [e for f in folders for e in check(root, f)]
    for e in errors:
        print(e)
    if not errors:
        print("include order: no circles" + (", every include downward" if all(f in LAYERS for f in folders) else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
