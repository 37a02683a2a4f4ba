"""`specprof reference`: the click command. It only parses options and calls the runner.

torch is imported only when the command runs, never when the CLI starts.
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from specprof.analyzer.errors import SpecprofError


def _require_torch() -> None:
    """One line, not an import traceback, when PyTorch is not installed here (a plain `pip install .`): the
    command that installs it into this Python, from the checkout specprof runs from (as the README installs)."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "torch"
        python = shlex.quote(sys.executable or "python3")
        root = _checkout()
        how = (f"install it with specprof's gpu extra from this checkout: {python} -m pip install -e "
               f"{shlex.quote(root + '[gpu]')}" if root else
               f"install it into this Python ({python} -m pip install torch), or specprof from its checkout with the "
               "gpu extra (pip install -e '.[gpu]' in the checkout, as its README does)")
        raise SpecprofError(f"the reference engine needs PyTorch, and `{missing}` cannot be imported in this Python "
                            f"environment; {how}") from None


def _checkout() -> str | None:
    """The root of the specprof checkout this module runs from (its pyproject.toml beside tracer/), or None where
    specprof is installed from a wheel."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as fh:
            return root if 'name = "specprof"' in fh.read() else None
    except OSError:
        return None


def _require_gpu(device: str) -> None:
    """One line, not a CUDA traceback, when the engine's device cannot be used."""
    import torch

    problem = None
    if not torch.cuda.is_available():
        problem = "no CUDA GPU is usable here"
    else:
        try:
            torch.empty(1, device=device)
        except Exception as exc:  # a bad index, a driver older than the runtime, ...
            problem = f"{device} cannot be used ({str(exc).splitlines()[0]})"
    if problem:
        raise SpecprofError(f"the reference engine needs a GPU: {problem}; to try it on the CPU, run "
                            "`specprof reference --tiny --device cpu`")


@click.command()
@click.option("--steps", "-k", type=click.IntRange(0, 16), default=4, show_default=True,
              help="Draft steps per cycle (verify runs steps+1 tokens); 0 is plain decoding (the baseline).")
@click.option("--cycles", "-n", type=click.IntRange(1), default=200, show_default=True,
              help="Measured speculative cycles (after the warm-up).")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Cycles run before the measured ones (CUDA-graph capture, allocator, caches).")
@click.option("--batch", type=click.IntRange(1), default=8, show_default=True, help="Requests per batch.")
@click.option("--draft-error", type=click.FloatRange(0, 1), default=0.25, show_default=True,
              help="Probability that a draft token is wrong (accept rate per position = 1 - this).")
@click.option("--hidden", type=click.IntRange(16), default=6144, show_default=True,
              help="Model width (heads of 128); sets how long verify and each draft step run.")
@click.option("--target-layers", type=click.IntRange(1), default=8, show_default=True,
              help="Layers of the target model (the draft has one).")
@click.option("--graph/--no-graph", "cuda_graph", default=True, show_default=True,
              help="Replay verify and draft-extend as CUDA graphs.")
@click.option("--device", default="cuda", show_default=True, help="The torch device to run on.")
@click.option("--tiny", is_flag=True, help="A CPU-sized engine (for trying the tool without a GPU).")
@click.option("--trace/--no-trace", "trace", default=None,
              help="Force the specprof tracer on or off [default: on when SPECPROF_TRACE=1, as under "
                   "`specprof capture`].")
@click.option("--ground-truth/--no-ground-truth", default=True, show_default=True,
              help="Record CUDA events at every phase boundary.")
@click.option("--profile-range", is_flag=True,
              help="Bracket the measured cycles with cudaProfilerStart/Stop (for --capture-range cudaProfilerApi).")
@click.option("--sync-timers", is_flag=True,
              help="Also time every phase the way a hand-made patch does (torch.cuda.synchronize() around each "
                   "phase): to measure how much that distorts the run (docs/economics.md).")
@click.option("--torch-trace", type=click.Path(dir_okay=False), help="Also run under torch.profiler and write its trace here.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder [default: $SPECPROF_OUT_DIR, else the current folder].")
@click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Tensor-parallel ranks: one process per GPU (NCCL; gloo with --tiny), an all-reduce after "
                   "attention and after the MLP (docs/multirank.md).")
def reference(steps, cycles, warmup, batch, draft_error, hidden, target_layers, cuda_graph, device, tiny,
              trace, ground_truth, profile_range, sync_timers, torch_trace, out_dir, tp):
    """Run specprof's EAGLE-shaped reference engine (PyTorch, random weights).

    One cycle: a K-step eager draft, a CUDA-graph verify of K+1 tokens with greedy acceptance,
    a CUDA-graph draft re-extend, and one host read of the accept counts. Writes
    ground_truth.json (CUDA-event phase times) into the output folder.
    """
    _require_torch()
    from specprof.tracer.reference.engine import EngineConfig
    from specprof.tracer.reference.runner import enable_tracer, run_reference

    if device.startswith("cuda") and not tiny:
        _require_gpu(device)

    if trace is True:
        enable_tracer()
    elif trace is False:
        os.environ["SPECPROF_TRACE"] = "0"
    if tiny:
        cfg = EngineConfig.tiny(steps=steps, batch=batch, draft_error=draft_error)
    else:
        cfg = EngineConfig(steps=steps, batch=batch, draft_error=draft_error, hidden=hidden,
                           heads=max(1, hidden // 128), target_layers=target_layers,
                           cuda_graph=cuda_graph, device=device)
    out = out_dir or os.environ.get("SPECPROF_OUT_DIR") or "."
    if tp > 1:
        if torch_trace or sync_timers:
            raise click.UsageError("--torch-trace and --sync-timers are for one process; run --tp without them")
        from specprof.tracer.reference import tp as parallel

        ranks = parallel.launch(tp, cfg, cycles, out, warmup=warmup, ground_truth=ground_truth,
                                profile_range=profile_range)
        for summary in ranks:
            r = summary["run"]
            click.echo(f"reference: TP rank {summary['tp']['rank']} of {tp}: K={steps} cycles={r['cycles']} "
                       f"tokens/s={r['tokens_per_s']:.1f} mean accept length={r['mean_accept_len']:.3f} "
                       f"traced={summary['traced']}", err=True)
        click.echo(f"reference: wrote ground_truth.json (rank 0) and ground_truth.rank<r>.json into {out}", err=True)
        return
    summary = run_reference(cfg, cycles, out, warmup=warmup, ground_truth=ground_truth,
                            profile_range=profile_range, torch_trace=torch_trace, sync_timers=sync_timers)
    r = summary["run"]
    click.echo(f"reference: K={steps} cycles={r['cycles']} tokens/s={r['tokens_per_s']:.1f} "
               f"mean accept length={r['mean_accept_len']:.3f} traced={summary['traced']}", err=True)
    for phase, ms in summary["mean_ms"].items():
        click.echo(f"  {phase:<13} {ms:8.4f} ms per cycle (CUDA events)", err=True)
    for phase, ms in summary.get("sync_timers", {}).get("mean_ms", {}).items():
        click.echo(f"  {phase:<13} {ms:8.4f} ms per cycle (synchronize timers)", err=True)
    click.echo(f"reference: wrote {os.path.join(out, 'ground_truth.json')}", err=True)
