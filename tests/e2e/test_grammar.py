"""Structured output: every complete output the constrained automaton can produce validates
against its JSON Schema, checked with the reference validator (the jsonschema package).

The outputs come from the unit-test binary: json_schema::writes_samples_for_validation walks
the token mask at random (a random vocabulary with multi-byte and JSON punctuation tokens) for
24 fixed schemas and 40 random ones, and writes schema + complete outputs into the folder named by
SG_GRAMMAR_SAMPLES_DIR. Generating in C and validating here keeps a single Criterion binary and
no extra program in the build."""
import json
import os
import subprocess

import jsonschema
import pytest

from conftest import ROOT


def unit_binary():
    path = os.environ.get("SARAGOSSA_UNIT_BIN") or str(ROOT / "build" / "test_unit")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (make build/test_unit)")
    return path


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    out = tmp_path_factory.mktemp("grammar_samples")
    env = dict(os.environ, SG_GRAMMAR_SAMPLES_DIR=str(out))
    r = subprocess.run([unit_binary(), "--filter", "json_schema/writes_samples_for_validation"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    docs = []
    for p in sorted(out.glob("sample_*.json")):
        docs.append((p.name, json.loads(p.read_text())))
    return docs


def test_at_least_twenty_fixed_schemas_and_random_ones_were_sampled(samples):
    assert len(samples) >= 60
    assert sum(len(d["outputs"]) for _, d in samples) >= 200


def test_every_complete_output_validates_against_its_schema(samples):
    checked = 0
    for name, doc in samples:
        schema = doc["schema"]
        validator = jsonschema.Draft202012Validator(schema)
        for text in doc["outputs"]:
            value = json.loads(text)  # the exact bytes the model would have produced
            errors = list(validator.iter_errors(value))
            assert not errors, f"{name}: {text!r} violates {schema}: {errors[0].message}"
            checked += 1
    assert checked >= 200


def test_outputs_cover_optional_and_additional_properties(samples):
    """The walk is random, so the sample should exercise more than the minimal documents."""
    seen_optional = False
    for _, doc in samples:
        props = doc["schema"].get("properties", {})
        req = set(doc["schema"].get("required", []))
        for text in doc["outputs"]:
            v = json.loads(text)
            if isinstance(v, dict) and any(k in v for k in props if k not in req):
                seen_optional = True
    assert seen_optional
