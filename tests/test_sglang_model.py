"""scripts/sglang/make_model.py: the acceptance it designs is what greedy speculative decoding gets.

The target is run by Hugging Face transformers (its Llama and Qwen3-MoE, plain torch on the CPU, bfloat16), the
EAGLE-3 head by make_model's own forward of SGLang's LlamaForCausalLMEagle3 structure (fc over three auxiliary
states, the decoder layer, the norm, lm_head; its attention output projection is zero, so attention is left
out), and the drafts are verified by the target as SGLang's greedy chain verify does. Tiny shapes, so that it
runs here; the GPU shapes use the same code with larger sizes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

SCRIPT = ROOT / "scripts" / "sglang" / "make_model.py"
spec = importlib.util.spec_from_file_location("make_model", SCRIPT)
make_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_model)

PROMPT = [1] + list(range(100, 140))  # serve.py's request 0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # tiny matrices: one thread is several times faster than two that share a loaded machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=["tiny", "tiny-moe"])
def model(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    subprocess.run([sys.executable, str(SCRIPT), str(out), "--shape", request.param], check=True,
                   capture_output=True)
    info = json.loads((out / "model.json").read_text())
    target = transformers.AutoModelForCausalLM.from_pretrained(str(out / "target"), dtype=torch.bfloat16)
    from safetensors.torch import load_file

    draft = {}
    for f in sorted((out / "draft").glob("*.safetensors")):
        draft |= load_file(str(f))
    return info, target.eval(), draft


def aux_states(target, ids: list[int]):
    """The target's greedy choice at every position, and the hidden states EAGLE-3 takes as its input (the
    input of layers 2, L/2 and L-3, as SGLang's set_eagle3_layers_to_capture; all equal here)."""
    with torch.no_grad():
        out = target(torch.tensor([ids]), output_hidden_states=True)
    layers = target.config.num_hidden_layers
    capture = [out.hidden_states[i][0].float() for i in (2, layers // 2, layers - 3)]
    assert all(torch.equal(c, capture[0]) for c in capture)
    return out.logits[0].float().argmax(-1).tolist(), capture[0]


def speculate(target, draft, steps: int, new_tokens: int) -> dict:
    """Greedy chain speculative decoding (EAGLE, topk 1) with full forwards: per cycle the draft proposes
    `steps` tokens from the target state of the token before the last verified one, the target verifies them,
    the longest right prefix and the target's own next token are kept."""
    seq = list(PROMPT)
    choice, aux = aux_states(target, seq)
    seq.append(choice[-1])  # the prefill's output
    a_pos = len(PROMPT) - 1
    tried, right, accepted = [0] * steps, [0] * steps, []
    while len(seq) - len(PROMPT) < new_tokens:
        drafts = [int(t[0, 0]) for t in make_model.draft_steps(torch, draft, aux[a_pos:a_pos + 1], steps)]
        choice, aux = aux_states(target, seq + drafts)
        n = 0
        for i, d in enumerate(drafts):
            tried[i] += 1
            if d != choice[len(seq) - 1 + i]:
                break
            right[i] += 1
            n += 1
        bonus = choice[len(seq) - 1 + n]
        seq += drafts[:n] + [bonus]
        a_pos = len(seq) - 2
        accepted.append(n)
    return {"tokens": seq[len(PROMPT):len(PROMPT) + new_tokens], "accepted": accepted, "tried": tried,
            "right": right}


@pytest.mark.parametrize("steps", [1, 2, 3, 6])
def test_greedy_speculation_accepts_what_was_designed(model, steps):
    info, target, draft = model
    pattern = make_model.agree_pattern(info["acceptance"]["runs"])
    got = speculate(target, draft, steps, 60)
    want = make_model.walk(pattern, steps, PROMPT[-1], 60)
    assert got["tokens"] == list(range(PROMPT[-1] + 1, PROMPT[-1] + 61))  # the target's own continuation
    assert got == want
    assert any(n >= 2 for n in got["accepted"]) or steps == 1  # later positions are right too


def test_the_design_is_the_users_regime():
    runs = make_model.runs_for([float(x) for x in make_model.DEFAULT_ACCEPTANCE.split(",")], 40)
    pattern = make_model.agree_pattern(runs)
    assert make_model.designed_acceptance(runs)[:3] == [0.75, 0.6, 0.5]
    lengths = {k: make_model.expected(pattern, k)["accept_length"] for k in (1, 2, 3, 4, 6)}
    assert 2.0 <= lengths[2] <= 2.4 and 2.1 <= lengths[3] <= 2.4
    assert all(lengths[k] < lengths[k + 1] for k in (1, 2, 3)) and lengths[6] <= 1 + sum(runs) / len(runs) + 1e-9
    # with K at least the longest run, the walk visits every run: per-position acceptance as designed
    k = max(runs) + 1
    assert make_model.expected(pattern, k)["acceptance_per_position"][:3] == pytest.approx([0.75, 0.6, 0.5], abs=2e-3)


def test_the_second_choice_is_right_where_designed(model):
    info, target, draft = model
    pattern = make_model.agree_pattern(info["acceptance"]["runs"])
    period = len(pattern)
    misses = [i for i, ok in enumerate(pattern) if not ok]
    first = 100
    _, aux = aux_states(target, list(range(first, first + period)))  # each position's state is its own token's
    top = make_model.draft_steps(torch, draft, aux, 1)[0].tolist()
    second_right = 0
    for a, (best, second) in zip(range(first, first + period), top):
        y = a + 1
        assert best == (y + 1 if pattern[y % period] else y + 2)
        second_right += not pattern[y % period] and second == y + 1
    assert second_right == pytest.approx(0.5 * len(misses), abs=1)


def test_model_json_states_the_model(model):
    info, target, _ = model
    config = target.config
    assert info["layers"] == config.num_hidden_layers and info["hidden"] == config.hidden_size
    params = sum(p.numel() for p in target.parameters())
    assert info["params_b"] == pytest.approx(params / 1e9, abs=1e-3)
    if info["shape"] == "tiny-moe":
        assert (info["experts"], info["experts_per_token"]) == (config.num_experts, config.num_experts_per_tok)
    assert set(info["expected"]) == {"1", "2", "3", "4", "5", "6"}


@pytest.mark.parametrize("shape,layers,params_b", [("dense", 32, 8.03), ("moe", 12, 8.1)])
def test_the_gpu_shapes(shape, layers, params_b):
    target, draft = make_model.count_params(make_model.SHAPES[shape])
    assert make_model.SHAPES[shape]["layers"] == layers >= 12 and target / 1e9 == pytest.approx(params_b, abs=0.05)
    if shape == "dense":
        assert layers >= 24 and target >= 4e9
