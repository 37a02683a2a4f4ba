"""A target model and an EAGLE-3 draft head whose greedy choices agree on a designed share of draft positions.

    python3 scripts/sglang/make_model.py OUT_DIR [--shape dense|moe|small|tiny|tiny-moe]
        [--acceptance 0.75,0.6,0.5,0.4,0.3,0.2 | --runs 1,0] [--cycles 40] [--second-choice 0.5]
        [--seed 0] [--config-only]

Writes OUT_DIR/target (the shape's architecture), OUT_DIR/draft (LlamaForCausalLMEagle3, one layer), each a
config.json and, unless --config-only (then serve them with `--load-format dummy`: random weights, accept length
1), safetensors in bfloat16 (sharded, with an index); and OUT_DIR/model.json: the shape (layers, hidden,
params_b, and for MoE experts and experts_per_token) beside the acceptance it was built for.

Shapes (SHAPES below): `dense` is Llama-3-8B's (32 layers, hidden 4096, 8.03 B parameters); `moe` is
Qwen3-30B-A3B's with 12 of its 48 layers (hidden 2048, 128 experts, 8 per token, 8.1 B parameters), served by
SGLang's fused-MoE Triton kernels; `small` is the 8-layer Llama of the first captures; `tiny` and `tiny-moe`
are for tests on the CPU.

The weights make the outcome of greedy speculative decoding known in advance, while every kernel of a real
forward still runs at its real shape (the GEMMs, attention, the experts, norms and the CUDA graphs do not care
what the numbers are):
- Embeddings E[t]: one constant coordinate (c = 1) and cos/sin pairs of random frequencies w_k,
  E[t] = (c, cos(w_1 t), sin(w_1 t), ...). Then E[t] . E[u] = c^2 + sum_k cos(w_k (t - u)): largest at u = t by
  far, and a shift by one token is linear: E[t + 1] = Q E[t], Q rotating each pair by w_k.
- Target: every attention output projection and MLP (or expert) down projection is zero, so each layer adds
  nothing to the residual stream: the hidden state at a position is E[t] of its own token t (the auxiliary
  hidden states EAGLE-3 takes from three layers included), and lm_head row u = E[u - 1] picks t + 1: the
  target continues any prompt with t+1, t+2, t+3, ... The MoE router is random, so tokens spread over the
  experts as in a real model.
- Draft: fc sums the three auxiliary states / 3 (= E[t]). Its decoder layer's attention adds nothing (zero
  output projection); its MLP is linear on the states (the gate reads the constant coordinate: silu of a
  constant) and adds (Q - I) S, so one pass maps E[y] to E[y + 1]. SGLang feeds the layer's pre-norm output
  back as the next step's state, so draft step i holds E[a + i], a being the token before the last verified
  one, and its lm_head picks g(a + i). The right token at step i is a + i + 1, so g(y) = y + 1 makes step i
  right when y = a + i is in the agree set A (residues mod the period), and g(y) = y + 2 makes it wrong.
- The period is a sequence of runs: r right draft positions, then a wrong one. A cycle that starts at a run of
  r <= K accepts r drafts plus the bonus token and ends just after the run's miss, so the next cycle starts
  at the next run: with K at least the longest run, the cycles walk the runs, and the acceptance at draft
  position i (given the ones before it were right) is #(runs >= i) / #(runs >= i - 1), as designed. With a
  smaller K, a run is cut after K accepted drafts (the next position is the bonus token's, never tested), the
  walk shifts, and the outcome is what `walk` computes: model.json's `expected` gives it per K.
- --second-choice F: for that share of the misses, the draft's second-best token is the right one (its head
  row also holds 0.5 E[y]); chains are unchanged. Its logit is second-best, but half the best's below it (1,448 at
  the dense shape), so its probability underflows to 0, as every other token's does: SGLang's tree keeps the top-k
  of the probabilities, so it never picks the second choice, and a tree accepts what the chain does (measured:
  fixtures/sglang-dense-tree, tests/test_sglang_tree.py).
Greedy sampling (temperature 0) and `ignore_eos` give the same tokens every run.
"""

from __future__ import annotations

import argparse
import json
import math
import os

COMMON_LLAMA = {"model_type": "llama", "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
                "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "max_position_embeddings": 4096}

# name -> target architecture and sizes; the draft head is one Llama layer of the target's hidden size
SHAPES = {
    "dense": {"arch": "LlamaForCausalLM", "layers": 32, "hidden": 4096, "intermediate": 14336, "heads": 32,
              "kv_heads": 8, "vocab": 128256, "rope_theta": 500000.0},
    "moe": {"arch": "Qwen3MoeForCausalLM", "layers": 12, "hidden": 2048, "intermediate": 6144, "heads": 32,
            "kv_heads": 4, "head_dim": 128, "vocab": 151936, "rope_theta": 1000000.0, "experts": 128,
            "experts_per_token": 8, "moe_intermediate": 768},
    "small": {"arch": "LlamaForCausalLM", "layers": 8, "hidden": 2048, "intermediate": 5632, "heads": 16,
              "kv_heads": 8, "vocab": 32000, "rope_theta": 10000.0},
    "tiny": {"arch": "LlamaForCausalLM", "layers": 6, "hidden": 256, "intermediate": 512, "heads": 4,
             "kv_heads": 2, "vocab": 2048, "rope_theta": 10000.0},
    "tiny-moe": {"arch": "Qwen3MoeForCausalLM", "layers": 6, "hidden": 256, "intermediate": 512, "heads": 4,
                 "kv_heads": 2, "head_dim": 64, "vocab": 2048, "rope_theta": 1000000.0, "experts": 8,
                 "experts_per_token": 2, "moe_intermediate": 128},
}
DEFAULT_ACCEPTANCE = "0.75,0.6,0.5,0.4,0.3,0.2"
GATE = 16.0  # the draft MLP's gate pre-activation: silu(16) = 16 (1 - 1e-7), so the MLP is linear
SHARD_BYTES = 4 << 30


def head_dim(shape: dict) -> int:
    return shape.get("head_dim", shape["hidden"] // shape["heads"])


def is_moe(shape: dict) -> bool:
    return "experts" in shape


def configs(shape: dict) -> tuple[dict, dict]:
    """The target's and the draft's config.json."""
    h, hd = shape["hidden"], head_dim(shape)
    base = {**COMMON_LLAMA, "hidden_size": h, "intermediate_size": shape["intermediate"],
            "num_attention_heads": shape["heads"], "num_key_value_heads": shape["kv_heads"], "head_dim": hd,
            "vocab_size": shape["vocab"], "rope_theta": shape["rope_theta"]}
    if is_moe(shape):
        target = {**base, "architectures": [shape["arch"]], "model_type": "qwen3_moe", "rms_norm_eps": 1e-06,
                  "num_hidden_layers": shape["layers"], "num_experts": shape["experts"],
                  "num_experts_per_tok": shape["experts_per_token"], "moe_intermediate_size": shape["moe_intermediate"],
                  "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False,
                  "output_router_logits": False, "router_aux_loss_coef": 0.001}
    else:
        target = {**base, "architectures": [shape["arch"]], "num_hidden_layers": shape["layers"]}
    draft = {**base, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
             "draft_vocab_size": shape["vocab"]}
    return target, draft


# ---- the acceptance design: runs, the agree set, and the walk greedy chain drafting takes through it ----

def runs_for(acceptance: list[float], cycles: int) -> list[int]:
    """Run lengths whose share reaching position i is the product of the first i acceptances (cycles runs),
    interleaved (long and short runs alternate) so that a cut run shifts the walk into a mixed part."""
    reach = [cycles]
    for p in acceptance:
        reach.append(round(reach[-1] * p) if reach[-1] else 0)
    counts = {r: reach[r] - (reach[r + 1] if r + 1 < len(reach) else 0) for r in range(len(reach))}
    ordered = sorted((r for r, n in counts.items() for _ in range(n)), reverse=True)
    out: list[int] = []
    while ordered:  # longest, shortest, next longest, next shortest, ...
        out.append(ordered.pop(0))
        if ordered:
            out.append(ordered.pop())
    return out


def agree_pattern(runs: list[int]) -> list[bool]:
    """One period: for each run r, r right positions then a wrong one."""
    pattern: list[bool] = []
    for r in runs:
        pattern += [True] * r + [False]
    return pattern


def designed_acceptance(runs: list[int]) -> list[float]:
    """Acceptance at draft position i = 1, 2, ... given the positions before it were right (K unbounded)."""
    out = []
    for i in range(1, max(runs, default=0) + 2):
        before = sum(1 for r in runs if r >= i - 1)
        if not before:
            break
        out.append(sum(1 for r in runs if r >= i) / before)
    return out


def walk(pattern: list[bool], steps: int, start: int, new_tokens: int) -> dict:
    """Greedy chain speculative decoding through the construction, as the server runs it: `start` is the last
    prompt token t. The prefill's own output is t + 1 (the target continues t + 1, t + 2, ...), so the first
    decode cycle's `a` (the token before the last verified one, whose state the draft is given) is t. Returns
    the output tokens, the accepted drafts per decode cycle, and per draft position the attempts (positions
    reached with all before right) and the right ones."""
    period = len(pattern)
    a, tokens, accepted = start, [start + 1], []
    tried, right = [0] * steps, [0] * steps
    while len(tokens) < new_tokens:
        n = 0
        for i in range(1, steps + 1):
            tried[i - 1] += 1
            if not pattern[(a + i) % period]:
                break
            right[i - 1] += 1
            n += 1
        accepted.append(n)
        tokens += list(range(a + 2, a + 2 + n + 1))  # n drafts a+2.., then the bonus (the target's own)
        a += n + 1
    return {"tokens": tokens[:new_tokens], "accepted": accepted, "tried": tried, "right": right}


def expected(pattern: list[bool], steps: int, cycles: int = 4000) -> dict:
    """Steady state over every start phase: accept length (tokens per cycle) and acceptance per position."""
    period, tokens, n_cycles = len(pattern), 0, 0
    tried, right = [0] * steps, [0] * steps
    for start in range(period):
        w = walk(pattern, steps, start, cycles * (steps + 1) // period + steps + 1)
        tokens += sum(n + 1 for n in w["accepted"])
        n_cycles += len(w["accepted"])
        tried = [x + y for x, y in zip(tried, w["tried"])]
        right = [x + y for x, y in zip(right, w["right"])]
    return {"accept_length": round(tokens / n_cycles, 4),
            "acceptance_per_position": [round(r / t, 4) if t else None for r, t in zip(right, tried)]}


# ---- the weights ----

def embeddings(torch, vocab: int, hidden: int, seed: int):
    """E[t] (float32, vocab x hidden), and the pair frequencies."""
    pairs = (hidden - 1) // 2
    w = torch.rand(pairs, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 * math.pi
    e = torch.zeros(vocab, hidden, dtype=torch.float32)
    e[:, 0] = 1.0
    for rows in torch.arange(vocab).split(8192):  # phases in float64: w t reaches 1e6 radians
        t = rows.double()[:, None] * w[None, :]
        e[rows, 1:1 + 2 * pairs:2] = torch.cos(t).float()
        e[rows, 2:2 + 2 * pairs:2] = torch.sin(t).float()
    return e, w


def shift_minus_identity(torch, hidden: int, w):
    """Q - I: Q E[t] = E[t + 1] (each cos/sin pair rotated by its frequency; the constant coordinate kept)."""
    m = torch.zeros(hidden, hidden, dtype=torch.float64)
    c, s = torch.cos(w), torch.sin(w)
    for k in range(len(w)):
        i, j = 1 + 2 * k, 2 + 2 * k
        m[i, i], m[i, j], m[j, i], m[j, j] = c[k] - 1, -s[k], s[k], c[k] - 1
    return m


def draft_guess(torch, pattern: list[bool], vocab: int, second_choice: float):
    """g(y) for every y: y + 1 where y mod period is in the agree set, else y + 2; and for the share
    second_choice of the misses (spread over the period), the right token y + 1 as the second choice (else -1)."""
    period = len(pattern)
    good = torch.tensor([pattern[y % period] for y in range(vocab)])
    y = torch.arange(vocab)
    guess = torch.where(good, y + 1, y + 2) % vocab
    misses = [i for i, ok in enumerate(pattern) if not ok]
    chosen = {m for j, m in enumerate(misses) if math.floor((j + 1) * second_choice) > math.floor(j * second_choice)}
    second_ok = torch.tensor([(v % period) in chosen for v in range(vocab)])
    second = torch.where(second_ok, (y + 1) % vocab, torch.full_like(y, -1))
    return guess, second


def target_weights(torch, shape: dict, embed, seed: int):
    """Yields (name, tensor) in bfloat16, one layer at a time."""
    bf = torch.bfloat16
    h, hd, nh, nkv = shape["hidden"], head_dim(shape), shape["heads"], shape["kv_heads"]
    zeros = lambda *s: torch.zeros(*s, dtype=bf)  # noqa: E731
    ones = lambda n: torch.ones(n, dtype=bf)  # noqa: E731
    yield "model.embed_tokens.weight", embed.to(bf)
    yield "model.norm.weight", ones(h)
    yield "lm_head.weight", torch.roll(embed, shifts=1, dims=0).to(bf)  # row u = E[u - 1]: after t comes t + 1
    gen = torch.Generator().manual_seed(seed + 1)
    for i in range(shape["layers"]):
        p = f"model.layers.{i}."
        yield p + "self_attn.q_proj.weight", zeros(nh * hd, h)
        yield p + "self_attn.k_proj.weight", zeros(nkv * hd, h)
        yield p + "self_attn.v_proj.weight", zeros(nkv * hd, h)
        yield p + "self_attn.o_proj.weight", zeros(h, nh * hd)
        yield p + "input_layernorm.weight", ones(h)
        yield p + "post_attention_layernorm.weight", ones(h)
        if is_moe(shape):
            yield p + "self_attn.q_norm.weight", ones(hd)
            yield p + "self_attn.k_norm.weight", ones(hd)
            # a random router: tokens spread over the experts as in a trained model
            yield p + "mlp.gate.weight", (torch.randn(shape["experts"], h, generator=gen) * 0.02).to(bf)
            mi = shape["moe_intermediate"]
            for x in range(shape["experts"]):
                q = f"{p}mlp.experts.{x}."
                yield q + "gate_proj.weight", zeros(mi, h)
                yield q + "up_proj.weight", zeros(mi, h)
                yield q + "down_proj.weight", zeros(h, mi)
        else:
            inter = shape["intermediate"]
            yield p + "mlp.gate_proj.weight", zeros(inter, h)
            yield p + "mlp.up_proj.weight", zeros(inter, h)
            yield p + "mlp.down_proj.weight", zeros(h, inter)


def draft_head(torch, embed, guess, second):
    """The draft's lm_head (float32, vocab x hidden): row g(y) holds E[y], and a second choice's row also 0.5 E[y]."""
    head = torch.zeros_like(embed).index_add_(0, guess, embed)
    has = second >= 0
    return head.index_add_(0, second[has], 0.5 * embed[has])


def draft_weights(torch, shape: dict, embed, w, guess, second):
    bf = torch.bfloat16
    h, hd, nh, nkv, inter = shape["hidden"], head_dim(shape), shape["heads"], shape["kv_heads"], shape["intermediate"]
    assert inter >= h, "the draft's linear MLP needs intermediate >= hidden"
    zeros = lambda *s: torch.zeros(*s, dtype=bf)  # noqa: E731
    ones = lambda n: torch.ones(n, dtype=bf)  # noqa: E731
    eye = torch.eye(h, dtype=torch.float32) / 3
    head = draft_head(torch, embed, guess, second)
    rms = float(embed[0].pow(2).mean().sqrt())  # every E[t] has the same norm
    gate = torch.zeros(inter, h, dtype=torch.float64)
    gate[:h, 0] = GATE * rms / float(embed[0, 0])  # reads the constant coordinate of the normed state: GATE
    up = torch.zeros(inter, h, dtype=torch.float64)
    up[:h, :h] = torch.eye(h, dtype=torch.float64)
    silu = GATE / (1 + math.exp(-GATE))
    down = torch.zeros(h, inter, dtype=torch.float64)
    down[:, :h] = shift_minus_identity(torch, h, w) * rms / silu
    p = "midlayer."
    return {"embed_tokens.weight": embed.to(bf), "fc.weight": torch.cat([eye, eye, eye], dim=1).to(bf),
            "norm.weight": ones(h), "lm_head.weight": head.to(bf),
            p + "self_attn.q_proj.weight": zeros(nh * hd, 2 * h),
            p + "self_attn.k_proj.weight": zeros(nkv * hd, 2 * h),
            p + "self_attn.v_proj.weight": zeros(nkv * hd, 2 * h),
            p + "self_attn.o_proj.weight": zeros(h, nh * hd),
            p + "mlp.gate_proj.weight": gate.to(bf), p + "mlp.up_proj.weight": up.to(bf),
            p + "mlp.down_proj.weight": down.to(bf),
            p + "input_layernorm.weight": ones(h), p + "hidden_norm.weight": ones(h),
            p + "post_attention_layernorm.weight": ones(h)}


def save_sharded(torch, tensors, folder: str) -> int:
    """Write (name, tensor) pairs as model-0000i.safetensors shards of at most SHARD_BYTES, with the index
    Hugging Face loaders read; returns the number of parameters."""
    from safetensors.torch import save_file

    shard, size, n, params, weight_map, names = {}, 0, 0, 0, {}, []

    def flush():
        nonlocal shard, size, n
        if shard:
            n += 1
            name = f"model-{n:05d}.safetensors"
            save_file(shard, os.path.join(folder, name), metadata={"format": "pt"})
            names.append(name)
            weight_map.update({k: name for k in shard})
            shard, size = {}, 0

    for key, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if size and size + nbytes > SHARD_BYTES:
            flush()
        shard[key] = tensor.contiguous()
        size += nbytes
        params += tensor.numel()
    flush()
    total = sum(os.path.getsize(os.path.join(folder, f)) for f in names)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=1)
    return params


def count_params(shape: dict) -> tuple[int, int]:
    """Parameters of the target and of the draft, from the shape (what the weights hold)."""
    h, hd, nh, nkv, v = shape["hidden"], head_dim(shape), shape["heads"], shape["kv_heads"], shape["vocab"]
    attn = h * nh * hd * 2 + h * nkv * hd * 2
    if is_moe(shape):
        mlp = shape["experts"] * 3 * h * shape["moe_intermediate"] + shape["experts"] * h + 2 * hd
    else:
        mlp = 3 * h * shape["intermediate"]
    target = 2 * v * h + h + shape["layers"] * (attn + mlp + 2 * h)
    draft_attn = 2 * h * nh * hd + 2 * h * nkv * hd * 2 + h * nh * hd
    draft = 2 * v * h + 3 * h * h + h + draft_attn + 3 * h * shape["intermediate"] + 3 * h
    return target, draft


def check(torch, embed, w, steps: int = 6, samples: int = 128) -> dict:
    """The greedy choices the weights make, in bfloat16 as the GPU computes them: the target picks t + 1, and
    draft step i (1..steps, each one pass of the draft's MLP on its own state) picks g(a + i). Also the
    margin: the largest E[t] . E[u] for u != t over the best, from the frequencies (every t at once)."""
    bf = torch.bfloat16
    vocab, h = embed.shape
    d = torch.arange(1, vocab, dtype=torch.float64)
    worst = 0.0
    for chunk in torch.split(d, 8192):
        worst = max(worst, float((torch.cos(chunk[:, None] * w[None, :].double())).sum(1).max()))
    peak = float(len(w))
    assert worst < 0.5 * peak, f"embeddings too close: {worst:.1f} of {peak:.1f}"
    gen = torch.Generator().manual_seed(1)
    t = torch.randint(0, vocab - steps - 3, (samples,), generator=gen)
    e = embed.to(bf)
    norm = lambda x: (x.float() / x.float().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()).to(bf)  # noqa: E731
    target = (norm(e[t]).float() @ torch.roll(e, 1, 0).float().T).argmax(-1)
    assert torch.equal(target, (t + 1) % vocab), "target does not continue with t + 1"
    return {"margin": round(1 - worst / peak, 3)}


def draft_steps(torch, draft: dict, aux, steps: int):
    """The draft head's greedy chain from one target state (plain torch, bfloat16 weights, the structure of
    SGLang's LlamaForCausalLMEagle3 with a zero attention output): per step the chosen token and the two best."""
    f = lambda k: draft[k].float()  # noqa: E731

    def rms(x, weight):
        return x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * weight

    s = (torch.cat([aux, aux, aux], -1).to(torch.bfloat16).float() @ f("fc.weight").T).to(torch.bfloat16).float()
    out = []
    for _ in range(steps):
        x = rms(s, f("midlayer.post_attention_layernorm.weight")).to(torch.bfloat16).float()
        g = torch.nn.functional.silu((x @ f("midlayer.mlp.gate_proj.weight").T).to(torch.bfloat16).float())
        u = (x @ f("midlayer.mlp.up_proj.weight").T).to(torch.bfloat16).float()
        m = ((g * u).to(torch.bfloat16).float() @ f("midlayer.mlp.down_proj.weight").T).to(torch.bfloat16).float()
        s = (s + m).to(torch.bfloat16).float()
        logits = rms(s, f("norm.weight")).to(torch.bfloat16).float() @ f("lm_head.weight").T
        out.append(logits.topk(2, dim=-1).indices)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="dense")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--acceptance", default=DEFAULT_ACCEPTANCE,
                       help="acceptance at draft positions 1, 2, ... given the ones before were right")
    group.add_argument("--runs", help="the period's runs of right draft positions, each ended by a wrong one")
    ap.add_argument("--cycles", type=int, default=40, help="runs in a period (the acceptances' resolution)")
    ap.add_argument("--second-choice", type=float, default=0.5,
                    help="share of the misses whose right token is the draft's second choice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config-only", action="store_true", help="configs only (serve with --load-format dummy)")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    if args.runs is not None:
        runs = [int(x) for x in args.runs.split(",") if x.strip()]
    else:
        runs = runs_for([float(x) for x in args.acceptance.split(",") if x.strip()], args.cycles)
    if not runs or min(runs) < 0:
        raise SystemExit("make_model: --runs / --acceptance give no period")
    pattern = agree_pattern(runs)
    target_cfg, draft_cfg = configs(shape)
    for name, config in (("target", target_cfg), ("draft", draft_cfg)):
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        with open(os.path.join(args.out, name, "config.json"), "w") as fh:
            json.dump(config, fh, indent=1)
    target_params, draft_params = count_params(shape)
    info = {"shape": args.shape, "architecture": shape["arch"], "layers": shape["layers"], "hidden": shape["hidden"],
            "intermediate": shape["intermediate"], "heads": shape["heads"], "kv_heads": shape["kv_heads"],
            "vocab": shape["vocab"], "params_b": round(target_params / 1e9, 3),
            "draft": {"architecture": "LlamaForCausalLMEagle3", "layers": 1, "params_b": round(draft_params / 1e9, 3)}}
    if is_moe(shape):
        info |= {"experts": shape["experts"], "experts_per_token": shape["experts_per_token"],
                 "moe_intermediate": shape["moe_intermediate"]}
    info |= {"seed": args.seed, "weights": not args.config_only,
             "acceptance": {"runs": runs, "period": len(pattern), "designed_per_position": designed_acceptance(runs),
                            "second_choice": args.second_choice},
             "expected": {str(k): expected(pattern, k) for k in (1, 2, 3, 4, 5, 6)} if not args.config_only else None}
    if not args.config_only:
        import torch

        embed, w = embeddings(torch, shape["vocab"], shape["hidden"], args.seed)
        guess, second = draft_guess(torch, pattern, shape["vocab"], args.second_choice)
        info["check"] = check(torch, embed, w)
        draft = draft_weights(torch, shape, embed, w, guess, second)
        got = draft_steps(torch, draft, embed[[100, 200]], 6)
        want = [[(a + i + 1) if pattern[(a + i) % len(pattern)] else (a + i + 2) for a in (100, 200)]
                for i in range(1, 7)]
        assert [g[:, 0].tolist() for g in got] == want, "the draft's chain does not pick g(a + i)"
        save_sharded(torch, target_weights(torch, shape, embed, args.seed), os.path.join(args.out, "target"))
        save_sharded(torch, draft.items(), os.path.join(args.out, "draft"))
    with open(os.path.join(args.out, "model.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    print(json.dumps({k: info[k] for k in ("shape", "layers", "hidden", "params_b", "acceptance")}))


if __name__ == "__main__":
    main()
