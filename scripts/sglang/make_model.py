"""A small Llama target and an EAGLE-3 draft head whose greedy choices agree on a known share of tokens.

    python3 scripts/sglang/make_model.py OUT_DIR [--agree 0,1 --period 3] [--config-only]

Writes OUT_DIR/target (LlamaForCausalLM: 8 layers, hidden 2048, 16 heads, 8 KV heads, vocab 32000) and
OUT_DIR/draft (LlamaForCausalLMEagle3: one layer), each a config.json and, unless --config-only (then serve
them with `--load-format dummy`: random weights, accept length 1), a model.safetensors in bfloat16.

The weights make the outcome of greedy speculative decoding known in advance, while every kernel of a real
forward still runs at its real shape (the GEMMs, attention, norms and the CUDA graphs do not care what the
numbers are):
- Embeddings E: random N(0, 1) rows, nearly orthogonal in 2048 dimensions.
- Target: every attention output projection and MLP down projection is zero, so each layer adds nothing to
  the residual stream: the hidden state at a position is E[t] of its own token t (the auxiliary hidden states
  EAGLE-3 takes from three layers included), and the final norm of it, through lm_head row u = E[u - 1],
  picks t + 1 (mod the vocabulary): the target continues any prompt with t+1, t+2, t+3, ...
- Draft: fc sums the three auxiliary states / 3 (= E[t]); its decoder layer adds nothing (zero output and
  down projections), so its prediction is a function g of the token t whose target hidden state it was given.
  EAGLE pairs that state with the next token t + 1 and asks for the one after, t + 2. The draft's lm_head
  makes g(t) = t + 2 when t mod PERIOD is in AGREE (a correct first draft token) and t + 3 otherwise (wrong).
  Its later steps see its own output state, still E[t], so they repeat g(t) and are always wrong.

So each decode cycle accepts 2 tokens (the first draft and the bonus) when the token before the last
verified one is in AGREE, else 1 (the bonus). With the defaults (PERIOD 3, AGREE 0,1) the walk goes 2, 1, 2,
1, ...: an accept length of exactly 1.5 in steady state, for any number of draft steps. Greedy sampling
(temperature 0) and `ignore_eos` give the same tokens every run.
"""

from __future__ import annotations

import argparse
import json
import os

HIDDEN, INTER, HEADS, KV_HEADS, LAYERS, VOCAB = 2048, 5632, 16, 8, 8, 32000
HEAD_DIM = HIDDEN // HEADS

COMMON = {"model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": INTER, "num_attention_heads": HEADS,
          "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
          "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
TARGET = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": LAYERS, **COMMON}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": VOCAB, **COMMON}


def target_weights(torch, embed):
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.bfloat16)  # noqa: E731
    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    w = {"model.embed_tokens.weight": embed, "model.norm.weight": ones(HIDDEN),
         # row u = E[u - 1]: the token after t is t + 1
         "lm_head.weight": torch.roll(embed, shifts=1, dims=0).contiguous()}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w |= {p + "self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.k_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.v_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.o_proj.weight": zeros(HIDDEN, HEADS * HEAD_DIM),
              p + "mlp.gate_proj.weight": zeros(INTER, HIDDEN), p + "mlp.up_proj.weight": zeros(INTER, HIDDEN),
              p + "mlp.down_proj.weight": zeros(HIDDEN, INTER),
              p + "input_layernorm.weight": ones(HIDDEN), p + "post_attention_layernorm.weight": ones(HIDDEN)}
    return w


def draft_guess(torch, period: int, agree: set[int]):
    """g(t) for every token t: t + 2 where t mod period is in agree, else t + 3 (mod the vocabulary)."""
    t = torch.arange(VOCAB)
    good = torch.zeros(VOCAB, dtype=torch.bool)
    for a in agree:
        good |= (t % period) == a
    return torch.where(good, t + 2, t + 3) % VOCAB


def draft_weights(torch, embed, guess):
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.bfloat16)  # noqa: E731
    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    eye = torch.eye(HIDDEN, dtype=torch.float32) / 3
    head = torch.zeros(VOCAB, HIDDEN, dtype=torch.float32).index_add_(0, guess, embed.float())
    p = "midlayer."
    return {"embed_tokens.weight": embed, "fc.weight": torch.cat([eye, eye, eye], dim=1).to(torch.bfloat16),
            "norm.weight": ones(HIDDEN), "lm_head.weight": head.to(torch.bfloat16),
            p + "self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.k_proj.weight": zeros(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.v_proj.weight": zeros(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.o_proj.weight": zeros(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": zeros(INTER, HIDDEN), p + "mlp.up_proj.weight": zeros(INTER, HIDDEN),
            p + "mlp.down_proj.weight": zeros(HIDDEN, INTER),
            p + "input_layernorm.weight": ones(HIDDEN), p + "hidden_norm.weight": ones(HIDDEN),
            p + "post_attention_layernorm.weight": ones(HIDDEN)}


def expected_accept_length(period: int, agree: set[int], start: int = 0, cycles: int = 10_000) -> float:
    """The steady-state accept length the weights give: walk the token before the last verified one."""
    t, tokens = start, 0
    for _ in range(cycles):
        step = 2 if t % period in agree else 1
        t, tokens = t + step, tokens + step
    return tokens / cycles


def check(torch, embed, guess, samples: int = 512) -> None:
    """The greedy choices the weights make, computed in float32 on the CPU: target t -> t + 1, draft -> g(t)."""
    gen = torch.Generator().manual_seed(1)
    t = torch.randint(0, VOCAB, (samples,), generator=gen)
    e = embed[t].float()
    h = e / e.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()
    target = (h @ torch.roll(embed, 1, 0).float().T).argmax(-1)
    assert torch.equal(target, (t + 1) % VOCAB), "target does not continue with t + 1"
    head = torch.zeros(VOCAB, HIDDEN).index_add_(0, guess, embed.float())
    draft = (h @ head.T).argmax(-1)
    assert torch.equal(draft, guess[t]), "draft does not pick g(t)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--period", type=int, default=3)
    ap.add_argument("--agree", default="0,1", help="residues of t mod PERIOD whose first draft token is right")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config-only", action="store_true", help="configs only (serve with --load-format dummy)")
    args = ap.parse_args()
    agree = {int(x) for x in args.agree.split(",") if x}
    for name, config in (("target", TARGET), ("draft", DRAFT)):
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        with open(os.path.join(args.out, name, "config.json"), "w") as fh:
            json.dump(config, fh, indent=1)
    info = {"period": args.period, "agree": sorted(agree), "seed": args.seed, "weights": not args.config_only,
            "expected_accept_length": expected_accept_length(args.period, agree) if not args.config_only else 1.0}
    if not args.config_only:
        import torch
        from safetensors.torch import save_file

        embed = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(args.seed)).to(torch.bfloat16)
        guess = draft_guess(torch, args.period, agree)
        check(torch, embed, guess)
        save_file(target_weights(torch, embed), os.path.join(args.out, "target", "model.safetensors"))
        save_file(draft_weights(torch, embed, guess), os.path.join(args.out, "draft", "model.safetensors"))
    with open(os.path.join(args.out, "model.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
