"""Parity of `saragossa eval` with the Hugging Face reference on the hybrid and Gemma 4 fixtures.

qwen3_next (fused in_proj_qkvz / in_proj_ba) and qwen3_5_moe_text (separate projections): three
gated delta net layers and one gated full-attention layer, MoE with a sigmoid-gated shared
expert (one tensor per expert; their *_stacked copies hold the experts stacked as transformers 5
does). gemma4_text: per-layer head dims, proportional partial rope, K/V shared by the last two
layers, double-wide MLP there, per-layer inputs. gemma4_text_moe: k = v full layer with one K/V
head, MoE beside the dense MLP, no per-layer inputs. Logits within 1e-3 of the reference, the 12
greedy tokens identical; one chunk, several chunks and token by token agree to f32 rounding,
also on a prompt long enough to cross the 64-token chunk of the delta rule.
"""
import json

import numpy as np
import pytest

from conftest import ROOT
from test_parity import FIX, TOL, reference, rel_err, run_eval

HYBRID = ["qwen3_next", "qwen3_5_moe_text", "gemma4_text", "gemma4_text_moe"]
# the Qwen fixtures with their experts in transformers 5's stacked gate_up_proj / down_proj
# (tools/restack_experts.py; the same values and reference); gemma4_text_moe is stacked already
STACKED = ["qwen3_next_stacked", "qwen3_5_moe_text_stacked"]


@pytest.mark.parametrize("name", HYBRID + STACKED)
def test_logits_and_greedy_match_reference(sg, tmp_path, name):
    ids, want, greedy = reference(name)
    got, toks, r = run_eval(sg, tmp_path, name, ids)
    assert got.size == want.size, f"{got.size} logits, expected {want.shape}"
    err = rel_err(got.reshape(want.shape), want)
    assert err <= TOL, f"{name}: max |dlogit| / max |logit| = {err:.3g} > {TOL}"
    assert toks == greedy, f"{name}: greedy {toks} != reference {greedy}"


@pytest.mark.parametrize("name", HYBRID)
def test_one_chunk_several_chunks_and_token_by_token_agree(sg, tmp_path, name):
    ids, _, greedy = reference(name)
    runs = {}
    for chunk in (64, 5, 1):
        got, toks, _ = run_eval(sg, tmp_path, name, ids, "--chunk", str(chunk), tag=str(chunk))
        runs[chunk] = got
        assert toks == greedy, f"chunk {chunk}: {toks} != {greedy}"
    # f32 rounding: 1e-5 on the CPU; on the GPU chunks of more than 8 tokens take the cuBLAS GEMM
    # and smaller ones the GEMV, which sum in other orders (qwen3_next: 1.8e-5 on an H200)
    for chunk in (5, 1):
        err = rel_err(runs[chunk], runs[64])
        assert err <= 3e-5, f"{name}: chunk {chunk} differs from one chunk by {err:.3g}"


@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5_moe_text"])
def test_delta_rule_chunk_boundary_inside_a_long_prompt(sg, tmp_path, name):
    # 150 tokens: the chunked delta rule runs 64 + 64 + 22 inside one forward chunk; token by
    # token runs the recurrent step 150 times; the token-by-token kernel switch runs it too
    rng = np.random.default_rng(7)
    ids = rng.integers(3, 320, size=150)
    one, _, _ = run_eval(sg, tmp_path, name, ids, "--chunk", "256", greedy=4, tag="one")
    step, _, _ = run_eval(sg, tmp_path, name, ids, "--chunk", "1", greedy=4, tag="step")
    nochunk, _, _ = run_eval(sg, tmp_path, name, ids, "--chunk", "256", greedy=4, tag="rec",
                             env={"SARAGOSSA_CPU_GDN_CHUNK": "0"})
    # f32 rounding only; over 150 random tokens one position of qwen3_5_moe_text amplifies it
    # to ~2e-5 (the rest stay near 1e-6), so the bound is 1e-4 over the whole prompt
    for other in (nochunk, step):
        assert rel_err(other, one) <= 1e-4
    # the first 64 positions: the chunked and the plain recurrence in the same prefill (same matmul
    # kernels) agree to 1e-5; token by token also swaps the prefill GEMM for the one-token kernels,
    # whose sums run in another order: f32 rounding again, a few 1e-5 at most
    assert rel_err(nochunk[:320 * 64], one[:320 * 64]) <= 1e-5
    assert rel_err(step[:320 * 64], one[:320 * 64]) <= 1e-4


def test_vision_and_audio_towers_are_refused_by_name(sg, tmp_path):
    cfg = json.loads((FIX / "gemma4_text" / "config.json").read_text())
    for tower in ("gemma4_vision", "gemma4_audio"):
        d = tmp_path / tower
        d.mkdir()
        (d / "config.json").write_text(json.dumps({**cfg, "model_type": tower}))
        (d / "model.safetensors").write_bytes((FIX / "gemma4_text" / "model.safetensors").read_bytes())
        r = sg("eval", "--model", str(d), "--tokens", "1,2,3", "--greedy", "1")
        assert r.returncode == 1
        assert "vision/audio tower" in r.stderr, r.stderr
        assert r.stdout == ""


def test_multimodal_wrapper_runs_its_text_part(sg, tmp_path):
    # a gemma4 config nests the text model under text_config and its tensors under
    # model.language_model: the text part must give the reference logits
    from test_fixtures import read_safetensors
    import struct
    cfg = json.loads((FIX / "gemma4_text" / "config.json").read_text())
    d = tmp_path / "gemma4_wrapped"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gemma4", "text_config": cfg,
                                               "vision_config": {"model_type": "gemma4_vision"}}))
    raw = (FIX / "gemma4_text" / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header = {(k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k): v
              for k, v in header.items()}
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
    ids, want, greedy = reference("gemma4_text")
    r = sg("eval", "--model", str(d), "--tokens", ",".join(map(str, ids)), "--greedy", "12")
    assert r.returncode == 0, r.stderr
    assert [int(t) for t in r.stdout.split()] == greedy
