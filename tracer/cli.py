"""Click commands of the tracer side (`specprof capture`, …). They only parse options and call the library.

Imported by specprof.analyzer.cli at start-up: nothing heavy (torch, SGLang) may be imported at module level here.
"""

from __future__ import annotations

from pathlib import Path

import click

from specprof.analyzer.errors import clean, clean_lines
from specprof.tracer import capture as capture_lib
from specprof.tracer import window


def _steps(ctx, param, value):
    if value is None:
        return None
    try:
        return [int(k) for k in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not K1,K2,... (step counts, e.g. 0,1,2,4)") from None


def _cycles(ctx, param, value):
    if value is None:
        return None
    try:
        return window.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("-o", "--output", "run_dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Run directory [default: specprof-run-<UTC timestamp>].")
@click.option("--nsys", "nsys_path", metavar="PATH",
              help="nsys to use [default: $NSYS, then PATH, then the standard install folders].")
@click.option("--capture-range", type=click.Choice(capture_lib.CAPTURE_RANGES),
              help="Record only between cudaProfilerStart/Stop, or inside an NVTX range (--nvtx-capture).")
@click.option("--nvtx-capture", metavar="RANGE@DOMAIN", help="The NVTX range that opens the capture.")
@click.option("--capture-cycles", metavar="W:N", callback=_cycles,
              help="Record N decode cycles after the first W (the tracer calls cudaProfilerStart/Stop in every "
                   "traced process): steady state, not start-up.")
@click.option("--delay", type=click.IntRange(min=0), metavar="S", help="Start recording S seconds after launch.")
@click.option("--duration", type=click.IntRange(min=1), metavar="S", help="Record for S seconds.")
@click.option("--extra-nsys-args", default="", metavar="ARGS",
              help="More `nsys profile` flags, split like a shell would (never run by one).")
@click.option("--preset", type=click.Choice(capture_lib.PRESETS), default="sglang", show_default=True,
              help="What the tracer wraps: SGLang's EAGLE workers or specprof's reference engine.")
@click.option("--no-tracer", is_flag=True, help="Do not load the specprof tracer into the workload.")
@click.option("--gpu-events", is_flag=True,
              help="The tracer also records CUDA events in-stream at phase boundaries (read later, never waited "
                   "for): per-phase GPU time to check the attribution against.")
@click.option("--no-nsys", is_flag=True,
              help="Run the workload with the tracer but without nsys: the twin run that measures what nsys changed "
                   "(use RUN/no-nsys as DIR).")
@click.option("--repeat", type=click.IntRange(1), default=1, show_default=True, metavar="N",
              help="With --no-nsys: run the workload N times, one after another, into DIR, DIR-2, ... DIR-N (repeated "
                   "twins: the run-to-run noise the economics and the sweep put into their intervals).")
@click.option("--sweep-steps", "sweep_steps", metavar="K1,K2,...", callback=_steps,
              help="Rotate the SGLang server between these step counts inside one launch, round-robin in blocks of "
                   "--block decode cycles (the capture starts it with the matching adaptive settings; "
                   "docs/capture.md).")
@click.option("--block", type=click.IntRange(1), default=40, show_default=True, metavar="N",
              help="With --sweep-steps: decode cycles per block of one K.")
@click.option("--nvidia-stats", is_flag=True,
              help="Also write NVIDIA's nvtx_gpu_proj_trace report (nvidia_nvtx_gpu_proj_trace.csv).")
@click.option("--server-log", "server_log", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write COMMAND's output (stdout and stderr, still shown as it comes) to FILE [default: "
                   "DIR/server.log, where `specprof analyze DIR` finds it].")
@click.option("--no-server-log", is_flag=True, help="Do not keep COMMAND's output in a file.")
@click.option("--dry-run", is_flag=True, help="Print the nsys command and environment additions; run nothing.")
@click.option("--force", is_flag=True, help="Replace the run already in DIR.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(run_dir, nsys_path, capture_range, nvtx_capture, capture_cycles, delay, duration, extra_nsys_args,
            preset, no_tracer, gpu_events, no_nsys, repeat, sweep_steps, block, nvidia_stats, server_log, no_server_log,
            dry_run, force, command):
    """Run COMMAND under Nsight Systems and write a run directory: run.nsys-rep, run.sqlite, the tracer's
    sidecars, server.log (COMMAND's output) and manifest.json.

    \b
    specprof capture -- python3 -m sglang.launch_server ...
    specprof capture --preset reference -- specprof reference --steps 4 --cycles 200
    """
    if repeat > 1 and not no_nsys:
        raise capture_lib.SpecprofError("--repeat repeats the twin run without nsys: give it with --no-nsys")
    if repeat > 1 and server_log:
        raise capture_lib.SpecprofError("--server-log FILE names one file, and --repeat writes several runs: leave "
                                        "it out (each run's output goes into its own DIR/server.log)")
    plans = [capture_lib.plan(
        command,
        run_dir=directory,
        nsys=nsys_path,
        capture_range=capture_lib.CaptureRange(capture_range, nvtx_capture, delay, duration, capture_cycles),
        extra_nsys_args=extra_nsys_args,
        preset=preset,
        tracer=not no_tracer,
        nvidia_stats=nvidia_stats,
        force=force,
        gpu_time=gpu_events,
        no_nsys=no_nsys,
        dry_run=dry_run,
        server_log=None if no_server_log else server_log.absolute() if server_log else capture_lib.SERVER_LOG,
        sweep_steps=sweep_steps,
        block=block,
    ) for directory in capture_lib.repeat_dirs(run_dir, repeat)]  # every one checked before any runs
    if dry_run:
        click.echo(clean_lines("\n\n".join(capture_lib.describe(plan) for plan in plans)))
        return
    for plan in plans:
        record = capture_lib.run(plan, say=lambda message: click.echo(clean(f"specprof: {message}"), err=True))
        files = record["files"]
        kept = [name for name in (files["report"], files["sqlite"]) if name] + files["sidecars"] \
            + files["nvidia_stats"] + [name for name in (files["server_log"],) if name]
        click.echo(clean(f"specprof: run written to {plan.run_dir}: {', '.join(kept + ['manifest.json'])}"), err=True)
        status = capture_lib.exit_status(record)
        if status:
            click.get_current_context().exit(status)
    click.get_current_context().exit(0)


from specprof.tracer.reference.command import reference  # noqa: E402  (torch is imported only when it runs)

COMMANDS = [capture, reference]
