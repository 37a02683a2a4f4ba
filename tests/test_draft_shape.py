"""Tree drafts (`--speculative-eagle-topk > 1`) and grouped decode steps (`--num-continuous-decode-steps`).

No capture here ran a tree draft: the tree cases take the real SGLang K = 4 run and rewrite its traced command
line (the sidecar header's argv) and its server log's start-up `server_args=ServerArgs(...)` line to what a tree
run would have; the timeline and counts stay the real ones. The server's log is what it ran with, and wins over
the command line: a run that left the shape to the server (no flags) is read from its log alone."""

from __future__ import annotations

import json
import os
import re

from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.derived import draft_shape
from specprof.analyzer.model.settings import FROM_SERVER_LOG
from conftest import FIXTURES


def _with_argv(tmp_path, run, change, version=None):
    out = tmp_path / run
    out.mkdir()
    for name in os.listdir(FIXTURES / run):
        src = FIXTURES / run / name
        if name.startswith("specprof-sidecar.") and name.endswith(".jsonl"):
            lines = src.read_text().splitlines()
            head = json.loads(lines[0])
            head["argv"] = change(head["argv"])
            if version:
                head["versions"]["sglang"] = version
            (out / name).write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
            argv = head["argv"]
        elif name == "server.log":
            continue  # rewritten below, as the command line says
        else:
            os.symlink(src, out / name)
    log = (FIXTURES / run / "server.log").read_text()
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--num-continuous-decode-steps"):
        if flag in argv:
            log = re.sub(rf"\b{flag[2:].replace('-', '_')}=\w+", f"{flag[2:].replace('-', '_')}={argv[argv.index(flag) + 1]}",
                         log)
    (out / "server.log").write_text(log)
    return out


def _set(argv, flag, value):
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def test_a_chain_draft_has_no_tree():
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-k4"), "--json", "--baseline",
                                    str(FIXTURES / "sglang-plain")])
    e = json.loads(out.output)["economics"]
    assert e["draft_tree"] is None and e["estimates"][0]["max_accept_len"] == 5


def test_a_tree_draft_is_detected_with_its_verify_tokens_and_accept_bound(tmp_path):
    run = _with_argv(tmp_path, "sglang-k4", lambda a: _set(_set(a, "--speculative-eagle-topk", "4"),
                                                           "--speculative-num-draft-tokens", "8"))
    out = CliRunner().invoke(main, ["analyze", str(run), "--json", "--baseline", str(FIXTURES / "sglang-plain")])
    e = json.loads(out.output)["economics"]
    assert e["draft_tree"] == {"topk": 4, "num_draft_tokens": 8, "verify_tokens": 8, "steps": 4, "max_accept_len": 5}
    assert any("tree draft (--speculative-eagle-topk 4)" in n and "verify checks 8 draft tokens" in n
               and "at most K + 1 = 5" in n for n in e["notes"])


def test_a_sweep_of_trees_predicts_no_other_k_and_refuses_different_widths(tmp_path):
    k2 = _with_argv(tmp_path, "sglang-k2", lambda a: _set(a, "--speculative-eagle-topk", "4"))
    k4 = _with_argv(tmp_path, "sglang-k4", lambda a: _set(a, "--speculative-eagle-topk", "4"))
    out = CliRunner().invoke(main, ["sweep", str(k2), str(k4), "--json"])
    d = json.loads(out.output)
    assert any("tree drafts (--speculative-eagle-topk 4)" in n for n in d["notes"])
    assert all(r["measured"] for r in d["predictions"])
    mixed = CliRunner().invoke(main, ["sweep", str(k2), str(FIXTURES / "sglang-k4")])
    assert mixed.exit_code == 2 and "different draft tree widths (--speculative-eagle-topk): 4" in mixed.output


def test_grouped_decode_steps_are_explained_per_sglang_version(tmp_path):
    run = _with_argv(tmp_path, "sglang-k4", lambda a: _set(a, "--num-continuous-decode-steps", "4"), "0.5.23")
    out = CliRunner().invoke(main, ["analyze", str(run), "--json", "--baseline", str(FIXTURES / "sglang-plain")])
    notes = json.loads(out.output)["economics"]["notes"]
    assert any("SGLang 0.5.23 declares the option but nothing in it reads it" in n for n in notes)
    other = draft_shape.shape_notes(draft_shape.DraftShape(steps=4, continuous_steps=4, version="0.5.16"))
    assert other and "has not checked" in other[0] and "one speculative forward" in other[0]


def test_sglang_0_5_23_declares_the_option_and_reads_it_nowhere():
    # the claim above, checked against the installed SGLang 0.5.23 source
    import sglang
    root = os.path.dirname(sglang.__file__)
    users = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py") and "num_continuous_decode_steps" in open(os.path.join(folder, name)).read():
                users.append(os.path.relpath(os.path.join(folder, name), root))
    assert sglang.__version__ == "0.5.23"
    assert sorted(users) == ["srt/arg_groups/field_order.py", "srt/arg_groups/fields/schedule.py"]


def test_a_shape_left_to_the_server_is_read_from_its_log(tmp_path):
    # SGLang chooses the draft's shape itself when the command line leaves it out, and logs what it chose: the
    # real dense K = 2 run with its shape flags taken off its command line (sidecar header and manifest) still
    # reads K = 2, 3 verify tokens, a chain, from its server log's start-up line.
    drop = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")

    def strip(argv):
        out = list(argv)
        for flag in drop:
            if flag in out:
                del out[out.index(flag):out.index(flag) + 2]
        return out

    run = _with_argv(tmp_path, "sglang-dense-k2", strip)
    (run / "manifest.json").unlink()
    manifest = json.loads((FIXTURES / "sglang-dense-k2" / "manifest.json").read_text())
    manifest["command"] = strip(manifest["command"])
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert "speculative_eagle_topk=1" in (run / "server.log").read_text()
    from specprof.analyzer.app.run import Run
    settings = Run.load(str(run)).data().settings
    assert settings.source("steps") == settings.source("topk") == FROM_SERVER_LOG
    assert (settings.steps, settings.tokens, settings.topk) == (2, 3, 1)
    assert draft_shape.draft_shape(settings).topk == 1 and settings.setup["topk"] == 1
    # and a tree where the log says the server ran one (the command line naming no shape)
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in os.listdir(run):
        if name != "server.log":
            os.symlink(os.path.realpath(run / name), tree / name)
    (tree / "server.log").write_text(re.sub(r"speculative_eagle_topk=\d+", "speculative_eagle_topk=4",
                                            re.sub(r"speculative_num_draft_tokens=\d+",
                                                   "speculative_num_draft_tokens=8", (run / "server.log").read_text())))
    out = CliRunner().invoke(main, ["analyze", str(tree), "--json", "--baseline",
                                    str(FIXTURES / "sglang-dense-plain")])
    assert out.exit_code == 0, out.output
    e = json.loads(out.output)["economics"]
    assert e["draft_tree"] == {"topk": 4, "num_draft_tokens": 8, "verify_tokens": 8, "steps": 2, "max_accept_len": 3}
