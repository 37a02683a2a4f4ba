"""Tree drafts on the large dense target: a real SGLang 0.5.16 EAGLE-3 run with `--speculative-num-steps 3
--speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --disable-overlap-schedule` on the 8.03 B
Llama-3-shaped model on an H200 (fixtures/sglang-dense-tree, under nsys, with its twin in no-nsys/;
fixtures/README.md; docs/sglang.md "Tree drafts on the dense target").

Beside it, the chain of the same steps on the same target (fixtures/sglang-dense-k3: topk 1, 4 draft tokens, the
overlap scheduler) and plain decoding (fixtures/sglang-dense-plain). The model's greedy choices are known in
advance (scripts/sglang/make_model.py --shape dense): the tree accepts exactly what the chain does, so what the
tree costs per cycle here is its cost, measured. Every number asserted below was measured on these captures.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.derived.crosscheck import GT_FLOOR_NS, GT_TOLERANCE
from specprof.analyzer.derived.draft_shape import draft_shape
from specprof.analyzer.model.settings import FROM_COMMAND_LINE, FROM_SERVER_LOG
from specprof.analyzer.readers.settings import read_settings, server_args
from specprof.analyzer.readers.sidecar import find, read_sidecars
from browser import Page, chromium
from conftest import FIXTURES, ROOT
from test_sglang_dense import load_script, read_json

TREE = FIXTURES / "sglang-dense-tree"
CHAIN = FIXTURES / "sglang-dense-k3"
PLAIN = FIXTURES / "sglang-dense-plain"
DESCRIPTION = ("tree, topk 4, 3 steps, 8 draft tokens (verify checks 8 tokens per request; a cycle accepts at most "
               "4: one path and the bonus token); from the server log's server_args")
SHAPE = {"kind": "tree", "steps": 3, "topk": 4, "num_draft_tokens": 8, "verify_tokens": 8, "max_accept_len": 4,
         "source": FROM_SERVER_LOG, "description": DESCRIPTION}


@pytest.fixture(scope="module")
def analysed():
    cache = {}

    def get(folder) -> Run:
        if folder not in cache:
            cache[folder] = Run.load(str(folder), Options(cache=False), RunInputs(baseline_run=str(PLAIN))).analysis()
        return cache[folder]

    return get


def phases(run: Run) -> dict:
    return {r["phase"]: r for r in run.cycle_breakdown.phases.iter_rows(named=True)}


def test_the_capture_is_the_dense_target_with_a_tree_draft():
    for sub in (TREE, TREE / "no-nsys"):
        model = read_json(sub / "model.json")
        assert (model["shape"], model["layers"], model["hidden"], model["params_b"]) == ("dense", 32, 4096, 8.03)
        manifest = read_json(sub / "manifest.json")
        assert manifest["versions"]["sglang"] == "0.5.16"
        argv = manifest["command"]
        flags = {f: argv[argv.index(f) + 1] for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                                      "--speculative-num-draft-tokens")}
        assert flags == {"--speculative-num-steps": "3", "--speculative-eagle-topk": "4",
                         "--speculative-num-draft-tokens": "8"}
        assert "--disable-overlap-schedule" in argv
        # what the server says it ran (its start-up line of resolved settings)
        logged = server_args(str(sub / "server.log"))
        assert {k: logged[k] for k in ("steps", "topk", "draft_tokens", "tp_size")} == {
            "steps": 3, "topk": 4, "draft_tokens": 8, "tp_size": 1}
        assert "disable_overlap_schedule=True" in (sub / "server.log").read_text()
    assert "disable_overlap_schedule=False" in (CHAIN / "server.log").read_text()


def test_analyze_names_the_tree_in_the_terminal_the_json_the_tables_and_the_report(tmp_path):
    terminal = CliRunner().invoke(main, ["analyze", str(TREE), "--no-cache", "-q"])
    assert terminal.exit_code == 0, terminal.output
    assert f"  draft: {DESCRIPTION}" in terminal.stdout.splitlines()
    out = tmp_path / "tree.html"
    result = CliRunner().invoke(main, ["analyze", str(TREE), "--json", "--html", str(out), "--csv",
                                       str(tmp_path / "tables"), "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["draft_shape"] == SHAPE
    assert pl.read_csv(tmp_path / "tables" / "draft_shape.csv").row(0, named=True) == SHAPE
    assert d["economics"]["draft_tree"] == {"topk": 4, "num_draft_tokens": 8, "verify_tokens": 8, "steps": 3,
                                            "max_accept_len": 4}
    note = next(n for n in d["economics"]["notes"] if n.startswith("tree draft"))
    assert "(--speculative-eagle-topk 4)" in note and "verify checks 8 draft tokens" in note
    with chromium() as browser:
        p = Page(browser, out)
        got = p.page.evaluate("""(() => {
          const dts = [...document.querySelectorAll('#run-facts dt')];
          const dt = dts.find(x => x.textContent === 'draft');
          return {draft: dt ? dt.nextElementSibling.textContent : null,
                  notes: [...document.querySelectorAll('#economics ul.notes li')].map(li => li.textContent)};
        })()""")
        assert p.console_errors() == []
    assert got["draft"] == DESCRIPTION
    assert note in got["notes"]


def sglang_runs() -> list:
    runs = []
    for folder in sorted(FIXTURES.glob("sglang-*")):
        runs += [folder] + sorted(p for p in folder.glob("no-nsys*") if p.is_dir())
    return runs


@pytest.mark.parametrize("folder", sglang_runs(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_sglang_capture_reads_with_its_own_shape(folder):
    """The server log's resolved settings and the traced command line (sidecar header, else manifest) agree on
    every SGLang capture, with nsys and without (every twin): the tree is a tree, every other speculative run a chain of the K its
    folder is named for, plain decoding no draft at all."""
    run = folder if folder.name.startswith("sglang-") else folder.parent
    # what analyze reads the shape from: the sidecar's header, the manifest, the server log's start-up line
    sidecars, manifest = read_sidecars(find(str(folder))), read_json(folder / "manifest.json")
    shape = draft_shape(read_settings(str(folder / "server.log"), sidecars, manifest))
    argv_only = draft_shape(read_settings(None, sidecars, manifest))
    if run.name.endswith("plain"):
        assert shape.kind is None and argv_only.kind is None and shape.description is None
        return
    assert argv_only.source == FROM_COMMAND_LINE
    assert shape.source == FROM_SERVER_LOG
    assert (shape.steps, shape.topk, shape.verify_tokens) == (argv_only.steps, argv_only.topk, argv_only.verify_tokens)
    if run == TREE:
        assert (shape.kind, shape.steps, shape.topk, shape.num_draft_tokens) == ("tree", 3, 4, 8)
    else:
        # an adaptive run (fixtures/sglang-ramp-*-adaptive) reads as the chain it starts with,
        # --speculative-num-steps 3: its K per cycle is the sidecar's (tests/test_sglang_ramp.py)
        k = 3 if run.name.endswith("-adaptive") else int(run.name.split("-k")[1].split("-")[0])
        assert (shape.kind, shape.steps, shape.topk, shape.verify_tokens) == ("chain", k, 1, k + 1)
        assert shape.as_tree() is None and shape.description.startswith(f"chain, {k} step")


def test_a_chain_analysis_names_its_chain(analysed):
    shape = analysed(CHAIN).draft_shape
    assert shape.description == ("chain, 3 steps (verify checks 4 tokens per request; a cycle accepts at most 4); "
                                "from the server log's server_args")
    assert analysed(CHAIN).economics.draft_tree is None


def kernels(run: Run, phase: str) -> dict:
    ops = run.ops.filter(pl.col("phase").cast(pl.Utf8) == phase)
    counts = ops.group_by(pl.col("short_name").cast(pl.Utf8)).len()
    return dict(counts.iter_rows())


def test_the_kernels_show_the_tree(analysed):
    """The capture's own kernels agree with the shape the log gives. The tree's draft runs a softmax over the
    vocabulary once per draft forward: 2 per cycle (SGLang runs K - 1 draft forwards), 80 in the 40 cycles. Each
    is followed by torch.topk on the probabilities, a radix select over the vocabulary (4 passes of
    computeBlockDigitCounts each: 320); 3 more top-ks per cycle pick among the tree's candidate scores (gatherTopK
    200 in all: 5 per cycle), their scores the products of the probabilities. The chain's draft runs SGLang's fused top-1 argmax instead, and no softmax."""
    tree, chain = kernels(analysed(TREE), "draft"), kernels(analysed(CHAIN), "draft")
    assert tree["cunn_SoftMaxForward"] == 80 and tree["computeBlockDigitCounts"] == 320
    assert tree["gatherTopK"] == 200
    # the candidates' scores, products of probabilities (torch.compile's kernel of scores x topk_p), twice a cycle
    assert tree["triton_poi_fused_mul_unsqueeze_view_0"] == 80
    assert not any(name.startswith("_draft_topk1") for name in tree)
    assert chain["_draft_topk1_partial_argmax_kernel"] == chain["_draft_topk1_finalize_kernel"] == 80
    assert "cunn_SoftMaxForward" not in chain and "gatherTopK" not in chain


def test_attributed_time_per_phase_instance_matches_the_cuda_events(analysed):
    # measured: verify +0.01 % (0.7 us of 8.060 ms), draft -0.19 %, draft_extend +0.24 %
    truth = analysed(TREE).crosscheck.ground_truth
    assert set(truth["phase"]) == {"draft", "verify", "draft_extend"}
    for r in truth.iter_rows(named=True):
        assert r["instances"] == 40 and r["verdict"] == "within", r
        assert abs(r["diff_ns"]) <= max(GT_TOLERANCE * r["events_ns"], GT_FLOOR_NS), r
        assert abs(r["diff_pct"]) < 0.3, r


def test_the_accept_length_is_the_server_logs_and_the_chains(analysed):
    """Sidecar 2.3146 per request-round over 1,106 rounds, SGLang's log 2.306 (13 lines; gap -0.008, within what
    its 10-iteration windows make). SGLang's own per-request counts are the chain's to the round: 1,106 verify
    rounds with 1,454 correct drafts, as in sglang-dense-k3, and as make_model.py's chain walk at K = 3 gives
    them: the tree never accepted a draft the chain would not have."""
    accept = analysed(TREE).crosscheck.accept
    assert accept.verdict in ("agree", "explained") and abs(accept.gap) < 0.01, accept
    assert accept.log_lines == 13 and accept.request_rounds == 1106
    assert accept.sidecar_pooled == pytest.approx(2.3146, abs=1e-4)
    chain = analysed(CHAIN).crosscheck.accept
    assert abs(accept.sidecar_pooled - chain.sidecar_pooled) < 0.001
    mm = load_script("make_model")
    for folder in (TREE, TREE / "no-nsys", CHAIN):
        model = read_json(folder / "model.json")
        pattern = mm.agree_pattern(model["acceptance"]["runs"])
        responses = read_json(folder / "client.json")["responses"]
        rounds = correct = 0
        for resp in responses:
            w = mm.walk(pattern, 3, resp["first_output_ids"][0] - 1, resp["output_tokens"])
            assert w["tokens"][:12] == resp["first_output_ids"]
            rounds += len(w["accepted"])
            correct += sum(w["accepted"])
        meta = [r["meta_info"] for r in responses]
        assert (sum(m["spec_verify_ct"] for m in meta), sum(m["spec_num_correct_drafts"] for m in meta)) \
            == (rounds, correct) == (1106, 1454), folder


def test_why_a_tree_buys_nothing_on_this_model():
    """make_model.py's second choice (`--second-choice 0.5`: for half the misses, the right token's head row also
    holds 0.5 E[y]) is the second-best logit at every such miss, but 1,416-1,448 below the best (bfloat16, the
    dense shape's hidden 4096), so its probability is exactly 0 in float32, as every token's but the first
    choice's (which is 1). SGLang's tree keeps the top-k of the probabilities (the draft's softmax, then top-k:
    test_the_kernels_show_the_tree), so the designed second choice is one of 128,255 tokens tied at 0."""
    import torch

    mm = load_script("make_model")
    model = read_json(TREE / "model.json")
    pattern = mm.agree_pattern(model["acceptance"]["runs"])
    period, vocab = len(pattern), 1024  # rows E[t] and the head's rows for t < vocab are the full model's
    embed, _ = mm.embeddings(torch, vocab, model["hidden"], model["seed"])
    guess, second = mm.draft_guess(torch, pattern, vocab, model["acceptance"]["second_choice"])
    head = mm.draft_head(torch, embed, guess, second).to(torch.bfloat16).float()
    states = torch.arange(period, 2 * period)  # one period, away from the vocabulary's wrap-around
    x = embed[states]
    normed = (x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()).to(torch.bfloat16).float()
    logits = (normed @ head.T).to(torch.bfloat16).float()
    has = second[states] >= 0
    assert int(has.sum()) == 20  # half of the period's 40 misses
    top = logits.topk(2, dim=-1)
    assert torch.equal(top.indices[has, 1], second[states][has])
    gap = (top.values[:, 0] - top.values[:, 1])[has]
    assert 1400 < float(gap.min()) and float(gap.max()) < 1460
    probs = torch.softmax(logits, dim=-1)
    assert float(probs.max(-1).values.min()) == 1.0
    assert float(probs.topk(2, dim=-1).values[:, 1].max()) == 0.0


def test_the_breakdown_with_and_without_nsys(analysed):
    """Shares of the cycle under nsys (on the cycle stream) and without it (between the twin's CUDA events, of
    its period): verify 62.8 % / 59.7 %, draft 16.8 / 17.8, draft_extend 7.6 / 8.6; without the overlap scheduler
    the GPU waits between cycles: (unattributed) 10.0 % under nsys, and 13.9 % of the twin's period (1.536 ms)
    falls between the phases' events. nsys stretches the GPU cycle 1.18x and the period 1.16x, where the chain's
    are 1.02x: the host sets the pace here, and nsys slows the host (its cycle call 1.50x)."""
    run = analysed(TREE)
    b, p = run.cycle_breakdown, phases(run)
    assert b.cycles == 39
    expected = {"verify": (0.628, 0.597), "draft": (0.168, 0.178), "draft_extend": (0.076, 0.086)}
    for phase, (share, unprofiled) in expected.items():
        assert p[phase]["share"] == pytest.approx(share, abs=0.002), phase
        assert p[phase]["unprofiled_share"] == pytest.approx(unprofiled, abs=0.002), phase
    assert p["(unattributed)"]["share"] == pytest.approx(0.100, abs=0.002)
    summary = run.breakdown_summary
    assert summary["untimed_ns"] == pytest.approx(1.536e6, rel=0.005)
    assert summary["untimed_share"] == pytest.approx(0.139, abs=0.002)
    assert b.mean_ns == pytest.approx(12.838e6, rel=0.001) and b.unprofiled_mean_ns == pytest.approx(11.035e6, rel=0.001)
    inflation = {(r["measure"], r["phase"]): r for r in run.crosscheck.inflation.iter_rows(named=True)}
    assert inflation[("gpu", "cycle")]["ratio"] == pytest.approx(1.177, abs=0.003)
    assert inflation[("cpu", "period")]["ratio"] == pytest.approx(1.163, abs=0.003)
    assert inflation[("cpu", "cycle")]["ratio"] == pytest.approx(1.504, abs=0.01)
    assert inflation[("gpu", "cycle")]["ratio_lo"] > 1.15
    chain = {(r["measure"], r["phase"]): r for r in analysed(CHAIN).crosscheck.inflation.iter_rows(named=True)}
    assert chain[("gpu", "cycle")]["ratio"] < 1.03


def test_what_the_tree_costs_against_the_chain_of_the_same_steps(analysed):
    """At the same accept length, per cycle, between the twins' CUDA events (without nsys): verify 6.585 against
    6.284 ms (+0.301: 8 tokens per request instead of 4), draft 1.960 against 0.898 (2.18x: four candidates per
    step, and a softmax and top-k over the vocabulary), draft_extend 0.954 against 0.621 (1.54x). The GPU's own
    work (busy time under nsys) grows less: verify +0.188 ms, draft +0.436, draft_extend +0.306, 0.930 ms per
    cycle over the three (the whole cycle's busy time 7.588 -> 8.512 ms). The period grows 7.831 -> 11.035 ms (1.41x): besides the phases' +1.70 ms, 1.507 ms more falls
    between them, the host's time that the tree's scheduler (overlap off) does not hide."""
    tree, chain = phases(analysed(TREE)), phases(analysed(CHAIN))
    events = {"verify": (6.585, 6.284), "draft": (1.960, 0.898), "draft_extend": (0.954, 0.621)}
    busy = {"verify": (6.330, 6.142), "draft": (1.293, 0.857), "draft_extend": (0.882, 0.576)}
    for phase in events:
        t, c = tree[phase], chain[phase]
        assert (t["unprofiled_ns_per_cycle"] / 1e6, c["unprofiled_ns_per_cycle"] / 1e6) == pytest.approx(
            events[phase], abs=0.002), phase
        assert (t["busy_ns_per_cycle"] / 1e6, c["busy_ns_per_cycle"] / 1e6) == pytest.approx(busy[phase], abs=0.002)
        assert t["unprofiled_ns_per_cycle"] > c["unprofiled_ns_per_cycle"] and t["busy_ns_per_cycle"] > c["busy_ns_per_cycle"]
    extra_events = sum(tree[p]["unprofiled_ns_per_cycle"] - chain[p]["unprofiled_ns_per_cycle"] for p in events)
    extra_busy = sum(tree[p]["busy_ns_per_cycle"] - chain[p]["busy_ns_per_cycle"] for p in events)
    assert extra_events == pytest.approx(1.697e6, rel=0.005) and extra_busy == pytest.approx(0.930e6, rel=0.005)
    t_run, c_run = analysed(TREE), analysed(CHAIN)
    assert c_run.breakdown_summary["untimed_ns"] < 0.05e6
    assert (t_run.breakdown_summary["busy_ns_per_cycle"] / 1e6, c_run.breakdown_summary["busy_ns_per_cycle"] / 1e6) \
        == pytest.approx((8.512, 7.588), abs=0.002)
    extra_untimed = t_run.breakdown_summary["untimed_ns"] - c_run.breakdown_summary["untimed_ns"]
    assert extra_untimed == pytest.approx(1.507e6, rel=0.005)
    t_period, c_period = t_run.cycle_breakdown.unprofiled_mean_ns, c_run.cycle_breakdown.unprofiled_mean_ns
    assert (t_period / 1e6, c_period / 1e6) == pytest.approx((11.035, 7.831), abs=0.002)
    # the period's growth is the phases' and the time between them
    assert t_period - c_period == pytest.approx(extra_events + extra_untimed, rel=0.005)


def test_the_tree_against_plain_decoding(analysed):
    """Against the plain step (4.758 ms, sglang-dense-plain's twins): the tree is a wash, 1.00x (0.96-1.03), its
    break-even accept length 2.319 (2.295-2.343) against its 2.309; the chain of the same steps 1.40x (1.35-1.46).
    Under nsys the tree reads 0.86x (0.82-0.89): the verdict flips, because nsys slows the host this cycle waits on.
    """
    e = analysed(TREE).economics
    head = e.headline
    assert head["source"] == "sidecar without nsys" and e.baseline_ns == pytest.approx(4.758e6, rel=0.001)
    assert head["speedup"] == pytest.approx(0.996, abs=0.002)
    assert head["speedup_lo"] < 1 < head["speedup_hi"]
    assert (head["speedup_lo"], head["speedup_hi"]) == pytest.approx((0.957, 1.035), abs=0.002)
    assert head["break_even_accept_len"] == pytest.approx(2.319, abs=0.002)
    assert head["break_even_lo"] < head["accept_len"] < head["break_even_hi"]
    profiled = e.estimates.filter(pl.col("source") == "sidecar under nsys").row(0, named=True)
    assert profiled["speedup"] == pytest.approx(0.856, abs=0.002) and profiled["speedup_hi"] < 1
    chain = analysed(CHAIN).economics.headline
    assert chain["speedup"] == pytest.approx(1.405, abs=0.002) and chain["speedup_lo"] > head["speedup_hi"]
    assert abs(chain["accept_len"] - head["accept_len"]) < 0.005


def test_compare_the_tree_with_the_chain():
    """`specprof compare` refuses a tree against a chain unless --allow-mixed (their draft shapes differ); with
    it, per cycle under nsys: 8.025 -> 12.838 ms attributed (+60 %). Verify's GEMMs, at 64 rows (8 requests x 8
    tokens) instead of 32, take 4.377 ms against 4.280 (1.02x): on this target verify's tokens are almost free, and
    verify's growth under nsys is its launches (0.276 -> 1.326 ms) and waits for the host."""
    runner = CliRunner()
    refused = runner.invoke(main, ["compare", str(CHAIN), str(TREE), "--no-cache"])
    assert refused.exit_code == 2 and "different draft tree widths (--speculative-eagle-topk): 1" in refused.output
    result = runner.invoke(main, ["compare", str(CHAIN), str(TREE), "--allow-mixed", "--json", "--no-cache"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert (d["total"]["a_ms"], d["total"]["b_ms"]) == pytest.approx((8.025, 12.838), abs=0.002)
    cats = {(r["phase"], r["category"]): r for r in d["categories"]}
    gemm = cats[("verify", "gemm")]
    assert (gemm["a_ms"], gemm["b_ms"]) == pytest.approx((4.280, 4.377), abs=0.002) and gemm["ratio"] < 1.03
    launch = cats[("verify", "launch")]
    assert (launch["a_ms"], launch["b_ms"]) == pytest.approx((0.276, 1.326), abs=0.002)


def test_the_output_docs_sglang_quotes_for_the_tree_is_what_analyze_and_compare_print(monkeypatch):
    from test_sglang_guide import GUIDE, blocks

    monkeypatch.chdir(ROOT)
    printed = set()
    for args in (["analyze", "fixtures/sglang-dense-tree", "--baseline", "fixtures/sglang-dense-plain"],
                 ["compare", "fixtures/sglang-dense-k3", "fixtures/sglang-dense-tree", "--allow-mixed"]):
        result = CliRunner().invoke(main, args + ["--no-cache"] + (["-q"] if args[0] == "analyze" else []))
        assert result.exit_code == 0, result.output
        printed |= {line.rstrip() for line in result.stdout.splitlines()}
    start = GUIDE.index("## Tree drafts on the dense target")
    quoted = [line for block in blocks(GUIDE[start:GUIDE.index("\n## ", start)]) for line in block]  # the section
    assert len(quoted) > 15
    assert [line for line in quoted if line not in printed] == []
