#!/usr/bin/python3
"""Derives parameter counts for the kv model presets from their public config.json fields.

The numbers printed here are the ones hard-coded in src/kv/model_presets.cc; docs/models.md cites
the config each field comes from. Run: /usr/bin/python3 scripts/kv/derive_params.py
"""


def dense_gqa(c):
    h, L = c["hidden"], c["layers"]
    hd = c["head_dim"]
    attn = h * c["heads"] * hd + 2 * h * c["kv_heads"] * hd + c["heads"] * hd * h
    if c.get("qkv_bias"):
        attn += c["heads"] * hd + 2 * c["kv_heads"] * hd
    if c.get("qk_norm"):
        attn += 2 * hd
    mlp = 3 * h * c["inter"]
    norms = 2 * h
    per_layer = attn + mlp + norms
    emb = c["vocab"] * h * (1 if c.get("tied") else 2)
    body = per_layer * L + h  # final norm
    return body + emb, body + emb, body, 0


def mla_moe(c):
    h, L = c["hidden"], c["layers"]
    nh = c["heads"]
    qk = c["qk_nope"] + c["qk_rope"]
    if c.get("q_lora"):
        q = h * c["q_lora"] + c["q_lora"] + c["q_lora"] * nh * qk
        iq = c["q_lora"] * c["index_heads"] * c["index_head_dim"]
    else:
        q = h * nh * qk
        iq = h * c["index_heads"] * c["index_head_dim"]
    kv = h * (c["kv_lora"] + c["qk_rope"]) + c["kv_lora"] + c["kv_lora"] * nh * (
        c["qk_nope"] + c["v_head"])
    o = nh * c["v_head"] * h
    indexer = 0
    if c.get("index_heads"):
        # wq_b (or wq), wk, k_norm (weight+bias), weights_proj
        indexer = iq + h * c["index_head_dim"] + 2 * c["index_head_dim"] + h * c["index_heads"]
    attn = q + kv + o + indexer
    norms = 2 * h
    dense_mlp = 3 * h * c["inter"]
    expert = 3 * h * c["moe_inter"]
    gate = h * c["routed"] + c["routed"]  # router weight + e_score_correction_bias
    nd = c["first_dense"]
    nm = L - nd
    total_body = L * (attn + norms) + nd * dense_mlp + nm * (gate + (c["routed"] + c["shared"]) * expert) + h
    active_body = L * (attn + norms) + nd * dense_mlp + nm * (gate + (c["topk"] + c["shared"]) * expert) + h
    emb = 2 * c["vocab"] * h
    return total_body + emb, active_body + emb, active_body, nm * c["routed"] * expert


MODELS = {
    # huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp config.json (MTP layer excluded)
    "ds660b": (mla_moe, dict(hidden=7168, layers=61, heads=128, q_lora=1536, kv_lora=512,
                             qk_nope=128, qk_rope=64, v_head=128, inter=18432, moe_inter=2048,
                             routed=256, shared=1, topk=8, first_dense=3, vocab=129280,
                             index_heads=64, index_head_dim=128)),
    # DualPath paper Appendix A.2; MLA dims and vocab assumed equal to DeepSeek-V3.2
    "ds27b": (mla_moe, dict(hidden=2560, layers=30, heads=32, q_lora=0, kv_lora=512, qk_nope=128,
                            qk_rope=64, v_head=128, inter=12288, moe_inter=1536, routed=72,
                            shared=2, topk=6, first_dense=1, vocab=129280, index_heads=32,
                            index_head_dim=64)),
    # huggingface.co/Qwen/Qwen2.5-32B config.json
    "qwen2.5-32b": (dense_gqa, dict(hidden=5120, layers=64, heads=40, kv_heads=8, head_dim=128,
                                    inter=27648, vocab=152064, qkv_bias=True)),
    # huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Llama-8B config.json (Llama-3.1-8B)
    "r1-llama-8b": (dense_gqa, dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                                    inter=14336, vocab=128256)),
    # huggingface.co/Qwen/Qwen3-32B config.json
    "qwen3-32b": (dense_gqa, dict(hidden=5120, layers=64, heads=64, kv_heads=8, head_dim=128,
                                  inter=25600, vocab=151936, qk_norm=True)),
}

if __name__ == "__main__":
    for name, (fn, cfg) in MODELS.items():
        total, active, active_body, routed = fn(cfg)
        print(f"{name:12s} total={total/1e9:8.3f}B active={active/1e9:7.3f}B "
              f"active_non_embedding={active_body/1e9:7.3f}B routed_experts={routed/1e9:7.3f}B  "
              f"({total}, {active}, {active_body}, {routed})")
