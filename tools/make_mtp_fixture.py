#!/usr/bin/env python3
"""Build tests/fixtures/qwen3_next_mtp: the tiny random Qwen3-Next of make_fixtures.py (same config, its
own seed) with a multi-token-prediction (MTP) module, and the module's reference outputs.

transformers runs Qwen3-Next without its MTP weights, so the module is composed here from transformers'
own classes the way vLLM and SGLang compose it (Qwen3NextMultiTokenPredictor / Qwen3NextForCausalLMMTP):

    e = embed_tokens(next token)                 (the main model's embedding table)
    h = the main model's last hidden state       (after its final norm)
    z = mtp.fc(concat(mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(h)))
    z = mtp.layers.0(z)                          (a Qwen3NextDecoderLayer with full attention, own KV cache,
                                                  built as layer 0: MoE with a shared expert here)
    out = mtp.norm(z); logits = lm_head(out)     (the main model's head)

At position i the module reads the hidden state of token i and the embedding of token i + 1 and predicts
token i + 2. A second draft step feeds `out` back as h with the first drafted token.

Files written (model.safetensors: the base model's tensors as save_pretrained writes them plus the mtp.*
tensors, bf16, experts one tensor per expert as the published checkpoints hold them; config.json with
"mtp_num_hidden_layers": 1):

    ref.safetensors
      input_ids   int32 [T]       a prompt of T tokens
      next_id     int32 [1]       the token after it
      logits      float32 [T, V]  the main model's logits of the prompt
      mtp_logits  float32 [T, V]  row i: the module at position i (hidden of token i, embedding of token i + 1;
                                  the last row's token i + 1 is next_id)
      mtp_next    float32 [V]     the second draft step at position T: the module's normed output at T - 1 as h,
                                  argmax(mtp_logits[T - 1]) as the token
      greedy      int32 [12]      greedy continuation of the prompt (main model), greedy_margins float32 [12]

Regenerate (torch and transformers, CPU):  python3 tools/make_mtp_fixture.py --out tests/fixtures
"""
import argparse
import copy
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

NAME = "qwen3_next_mtp"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    from transformers.models.qwen3_next import modeling_qwen3_next as q3n

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    spec = next(s for s in mf.SPECS if s["name"] == "qwen3_next")
    seed = mf.seed_for(NAME)
    model = mf.build_model(spec, seed)
    config = model.config
    D, V = config.hidden_size, config.vocab_size

    # the MTP module: its decoder layer is built as layer 0 of a one-layer full-attention stack
    mcfg = copy.deepcopy(config)
    mcfg.layer_types = ["full_attention"]
    mcfg.num_hidden_layers = 1
    layer = q3n.Qwen3NextDecoderLayer(mcfg, 0).eval()
    for m in layer.modules():
        if hasattr(m, "config"):
            m.config._experts_implementation = "eager"
    mtp = torch.nn.ModuleDict({
        "fc": torch.nn.Linear(2 * D, D, bias=False),
        "pre_fc_norm_embedding": q3n.Qwen3NextRMSNorm(D, eps=config.rms_norm_eps),
        "pre_fc_norm_hidden": q3n.Qwen3NextRMSNorm(D, eps=config.rms_norm_eps),
        "norm": q3n.Qwen3NextRMSNorm(D, eps=config.rms_norm_eps),
        "layers": torch.nn.ModuleList([layer]),
    }).eval()
    mf.fill_weights(mtp, np.random.default_rng([seed, 3]), {})

    rng = np.random.default_rng([seed, 7])
    T = mf.PROMPT_LEN
    ids = rng.integers(3, V, T + 1).astype(np.int32)
    rotary = model.model.rotary_emb

    def run_mtp(h, nxt):
        """h [n, D] hidden states, nxt [n] next tokens at positions 0..n-1 -> (normed output, logits)."""
        n = h.shape[0]
        e = model.model.embed_tokens(torch.tensor(nxt, dtype=torch.long))
        z = mtp["fc"](torch.cat([mtp["pre_fc_norm_embedding"](e), mtp["pre_fc_norm_hidden"](h)], dim=-1))[None]
        pos = torch.arange(n)[None]
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        z = mtp["layers"][0](z, position_embeddings=rotary(z, pos), attention_mask=mask, position_ids=pos)
        out = mtp["norm"](z)[0]
        return out, model.lm_head(out)

    with torch.no_grad():
        inp = torch.tensor(ids[:T][None], dtype=torch.long)
        res = model.model(input_ids=inp, use_cache=False)
        hidden = res.last_hidden_state[0]
        logits = model.lm_head(hidden)
        out, mlog = run_mtp(hidden, ids[1:T + 1].tolist())
        d0 = int(mlog[T - 1].argmax())
        out2, mlog2 = run_mtp(torch.cat([hidden, out[T - 1:T]]), ids[1:T + 1].tolist() + [d0])
        # the rows before the chained one are the first pass's
        assert torch.allclose(mlog2[:T], mlog, atol=1e-5)
    toks, margins = mf.greedy(lambda s: mf.lm_logits(model, s), ids[:T].tolist())

    outdir = os.path.join(args.out, NAME)
    os.makedirs(outdir, exist_ok=True)
    state, cfg = mf.saved_state(model)
    tensors = {k: mf.bf16_tensor(k, v) for k, v in sorted(state.items())}
    for k, v in mtp.state_dict().items():
        w = v.detach().float().numpy()
        if k.endswith("mlp.experts.gate_up_proj"):  # the published layout: one tensor per expert
            F = w.shape[1] // 2
            stem = "mtp." + k[: -len("gate_up_proj")]
            for e in range(w.shape[0]):
                tensors[f"{stem}{e}.gate_proj.weight"] = mf.bf16_tensor(k, np.ascontiguousarray(w[e, :F]))
                tensors[f"{stem}{e}.up_proj.weight"] = mf.bf16_tensor(k, np.ascontiguousarray(w[e, F:]))
        elif k.endswith("mlp.experts.down_proj"):
            stem = "mtp." + k[: -len("down_proj")]
            for e in range(w.shape[0]):
                tensors[f"{stem}{e}.down_proj.weight"] = mf.bf16_tensor(k, np.ascontiguousarray(w[e]))
        else:
            tensors["mtp." + k] = mf.bf16_tensor(k, w)
    meta = {"seed": seed, "torch": torch.__version__, "transformers": transformers.__version__}
    mf.write_safetensors(os.path.join(outdir, "model.safetensors"), tensors, meta)
    cfg["mtp_num_hidden_layers"] = 1
    cfg["mtp_use_dedicated_embeddings"] = False
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    ref = {"input_ids": ("I32", ids[:T]), "next_id": ("I32", ids[T:]), "logits": ("F32", logits.numpy()), "mtp_logits": ("F32", mlog.numpy()),
           "mtp_next": ("F32", mlog2[T].numpy()), "greedy": ("I32", toks),
           "greedy_margins": ("F32", margins)}
    mf.write_safetensors(os.path.join(outdir, "ref.safetensors"), ref, meta)
    top2 = mlog.topk(2, dim=-1).values
    print(f"{outdir}: {len(tensors)} tensors; MTP top-1 margins min {float((top2[:, 0] - top2[:, 1]).min()):.3f}; "
          f"greedy margins min {float(margins.min()):.3f}")


if __name__ == "__main__":
    main()
