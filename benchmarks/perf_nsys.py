"""specprof against its peers on the same nsys exports, side by side in one run: time, CPU, peak memory, ratios.

    python3 benchmarks/perf_nsys.py build [--dir /tmp/specprof-bench]      # the inputs (minutes, ~2.5 GB)
    python3 benchmarks/perf_nsys.py run [--dir ...] [--sizes 1,4,16,64] [--nsys-ai VENV/bin/nsys-ai] [--out FILE]

The inputs (`build`) are real captures scaled by benchmarks/scale_nsys.py: `mixN.sqlite` holds 8N copies of
fixtures/reference-k4 (the reference engine's speculative cycles on an H200), N copies of nsys-ai's
h100_2gpu_1s capture (NVTX-heavy: emit_nvtx ranges around every aten op) after them, and copies of the
reference capture's own non-launching CUDA calls up to 312,500 N runtime rows. mix64 is the 10-million-kernel target:
10.4 M kernels (11.1 M GPU ops), 20 M CUDA API rows, 1.33 M NVTX ranges.

`run` measures, per input, each in a fresh process, one after the other:
- specprof cold: `specprof analyze FILE --json --no-cache` (benchmarks/stages.py: per-step times and memory);
  then the same with SPECPROF_SQLITE_PAGES=0 (every table read through SQLite: what the page reader saves);
- specprof first run with the cache (parses, analyses and writes the Parquet cache), then the next run (reads it);
- nsys-ai: `nsys-ai skill run nvtx_kernel_map FILE --format json -p limit=1000000000 --max-rows 1`, its innermost-NVTX
  projection of every kernel, first with no cache of its own (it builds its Parquet cache beside the file),
  then again (cache present). nsys-ai is not a dependency: install it in a venv of its own (docs/performance.md);
- `nsys stats -q -r nvtx_gpu_proj_trace -f csv FILE` when nsys is there (--nsys, $NSYS or PATH: the GPU
  machine), NVIDIA's own projection of the same file.

Ratios are wall-time ratios on the same file in the same run (peer time / specprof time: above 1 means
specprof is faster). Timings are never asserted in CI; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "fixtures", "reference-k4", "run.sqlite")
NVTX_HEAVY = "nsysai_h100_2gpu_1s.sqlite"
API_ROWS_PER_UNIT = 312_500


def _shared_traces() -> str | None:
    for c in (os.environ.get("SPECPROF_SHARED_TRACES"), os.path.join(ROOT, "..", "shared", "traces"),
              "/work/shared/traces"):
        if c and os.path.isfile(os.path.join(c, "nsys_sqlite", NVTX_HEAVY)):
            return os.path.join(c, "nsys_sqlite", NVTX_HEAVY)
    return None


def build(folder: str, sizes: list[int]) -> None:
    heavy = _shared_traces()
    if heavy is None:
        sys.exit("benchmarks: the shared captures (shared/traces) are not beside this checkout; "
                 "set SPECPROF_SHARED_TRACES")
    os.makedirs(folder, exist_ok=True)
    for n in sizes:
        dst = os.path.join(folder, f"mix{n}.sqlite")
        done = dst + ".built"  # written after a complete build: a second call keeps the input
        if os.path.exists(dst) and os.path.exists(done):
            print(f"benchmarks: {dst} is there already", file=sys.stderr)
            continue
        cmd = [sys.executable, os.path.join(HERE, "scale_nsys.py"), FIXTURE, str(8 * n), dst,
               "--add", f"{heavy}:{n}", "--api-rows", str(API_ROWS_PER_UNIT * n)]
        print("+", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        with open(done, "w") as fh:
            fh.write(" ".join(cmd) + "\n")


def measured(cmd: list[str], stdout=subprocess.DEVNULL, env=None, timeout_s: int = 3600) -> dict:
    """Run `cmd` in a child of a fresh measuring process: wall, user+sys CPU and peak RSS of the command
    and its children (rc 124 when it ran past `timeout_s`)."""
    probe = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
             "p = subprocess.Popen(sys.argv[2:], stdout=sys.stdout, stderr=subprocess.PIPE)\n"
             "try:\n    err = p.communicate(timeout=float(sys.argv[1]))[1]; rc = p.returncode\n"
             "except subprocess.TimeoutExpired:\n    p.kill(); err = p.communicate()[1]; rc = 124\n"
             "w = time.perf_counter() - t; r = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "sys.stderr.write(json.dumps({'rc': rc, 'wall_s': round(w, 3), "
             "'cpu_s': round(r.ru_utime + r.ru_stime, 3), 'peak_rss': r.ru_maxrss * 1024, "
             "'stderr_tail': err.decode(errors='replace')[-400:]}))")
    p = subprocess.run([sys.executable, "-c", probe, str(timeout_s), *cmd], stdout=stdout, stderr=subprocess.PIPE,
                       env=env)
    try:
        return json.loads(p.stderr.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"rc": p.returncode, "error": p.stderr.decode(errors="replace")[-400:]}


def _specprof_stages(path: str, cache: bool, env: dict | None = None) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "stages.py"), path] + ([] if cache else ["--no-cache"])
    p = subprocess.run(cmd, capture_output=True, text=True, env=None if env is None else {**os.environ, **env})
    if p.returncode:
        return {"rc": p.returncode, "error": p.stderr[-400:]}
    return json.loads(p.stdout)


def _has_polars() -> bool:
    try:
        import polars  # noqa: F401
    except ImportError:  # the GPU machine's image: nsys stats alone there
        print("benchmarks: no polars here: specprof is not measured on this machine", file=sys.stderr)
        return False
    return True


def _row_counts(path: str) -> dict:
    """Rows per table that the analyses read: the same inputs, whatever the machine that built them."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in
                ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                 "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds") if t in have}
    finally:
        con.close()


def _drop_specprof_cache(path: str) -> None:
    from specprof.analyzer.readers import trace_cache

    shutil.rmtree(trace_cache.location(path), ignore_errors=True)


def _drop_nsysai_cache(path: str) -> None:
    base = os.path.splitext(path)[0]
    shutil.rmtree(base + ".nsys-cache", ignore_errors=True)
    for f in (base + ".nsys-cache.build.lock",):
        if os.path.exists(f):
            os.remove(f)


def run(folder: str, sizes: list[int], nsys_ai: str | None, out: str | None, nsys: str | None = None) -> dict:
    sys.path.insert(0, ROOT)
    nsys = nsys or os.environ.get("NSYS") or shutil.which("nsys")
    rows = []
    for n in sizes:
        path = os.path.join(folder, f"mix{n}.sqlite")
        if not os.path.isfile(path):
            sys.exit(f"benchmarks: {path} missing: run `python3 benchmarks/perf_nsys.py build --dir {folder}`")
        with open(path, "rb") as fh:  # the file in the page cache for every tool alike
            while fh.read(1 << 24):
                pass
        row = {"size": n, "path": path, "bytes": os.path.getsize(path)}
        print(f"== mix{n}: {row['bytes'] / 1e9:.2f} GB", file=sys.stderr)
        row["tables"] = _row_counts(path)
        if _has_polars():
            row["specprof_cold"] = _specprof_stages(path, cache=False)
            # the same, every table read through SQLite (ADBC): what the C page reader saves, in this run
            row["specprof_cold_sqlite"] = _specprof_stages(path, cache=False, env={"SPECPROF_SQLITE_PAGES": "0"})
            _drop_specprof_cache(path)
            row["specprof_first"] = _specprof_stages(path, cache=True)
            row["specprof_cached"] = _specprof_stages(path, cache=True)
            _drop_specprof_cache(path)
        if nsys_ai:
            _drop_nsysai_cache(path)
            # Every kernel mapped (limit), only one row printed (--max-rows): the mapping, not the JSON, is timed.
            cmd = [nsys_ai, "skill", "run", "nvtx_kernel_map", path, "--format", "json", "-p", "limit=1000000000",
                   "--max-rows", "1"]
            row["nsysai_cold"] = measured(cmd)
            row["nsysai_cached"] = measured(cmd)
            _drop_nsysai_cache(path)
        if nsys:
            prefix = os.path.join(folder, f"nsys-stats-mix{n}")
            row["nsys_stats"] = measured([nsys, "stats", "-q", "-r", "nvtx_gpu_proj_trace", "-f", "csv", "-o", prefix,
                                          "--force-overwrite", "true", path])
        rows.append(row)
        print(_line(row), file=sys.stderr)
    result = {"machine": _machine(), "rows": rows}
    text = json.dumps(result, indent=1)
    if out:
        with open(out, "w") as fh:
            fh.write(text)
    print(table(result))
    return result


def _machine() -> dict:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    try:
        import polars

        version = polars.__version__
    except ImportError:
        version = None
    try:
        cores = len(os.sched_getaffinity(0))  # what taskset gave this run
    except (AttributeError, OSError):
        cores = None
    return {"cpus": os.cpu_count(), "cores_usable": cores, "memory_bytes": mem, "python": platform.python_version(),
            "polars": version, "platform": platform.platform(), "loadavg_at_end": load,
            "nsys": os.environ.get("NSYS") or shutil.which("nsys"), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def _w(d: dict | None) -> float | None:
    return None if not d or d.get("rc") not in (None, 0) else d.get("wall_s")


def _line(row: dict) -> str:
    parts = [f"mix{row['size']}"]
    for k in ("specprof_cold", "specprof_cold_sqlite", "specprof_first", "specprof_cached", "nsysai_cold", "nsysai_cached", "nsys_stats"):
        if k in row:
            d = row[k]
            parts.append(f"{k} {_w(d)} s / {d.get('peak_rss', 0) / 1e9:.2f} GB" if _w(d) is not None
                         else f"{k} failed ({d.get('error') or d.get('stderr_tail', '')[-120:]!r})")
    return "; ".join(parts)


def table(result: dict) -> str:
    """The results as a Markdown table (wall s, peak GB, ratios)."""
    head = ("| input | GPU ops | API rows kept | NVTX ranges | file GB | specprof cold s | peak GB | "
            "first run (+cache) s | cached s | cached speed-up | nsys-ai cold s | peak GB | nsys-ai cached s | "
            "vs nsys-ai cold | vs nsys-ai cached | nsys stats s | vs nsys stats |")
    lines = [head, "|" + "---|" * head.count("|")[:-1] if False else "|" + "---|" * (head.count("|") - 1)]
    for r in result["rows"]:
        c, f, h = r.get("specprof_cold", {}), r.get("specprof_first", {}), r.get("specprof_cached", {})
        na, nc, ns = r.get("nsysai_cold"), r.get("nsysai_cached"), r.get("nsys_stats")

        def ratio(a, b):
            return f"{a / b:.1f}x" if a and b else "-"

        def s(x):
            return f"{x:.1f}" if x is not None else "-"

        def gb(d):
            return f"{d['peak_rss'] / 1e9:.2f}" if d and d.get("peak_rss") else "-"

        lines.append(
            f"| mix{r['size']} | {c.get('ops', 0):,} | {c.get('api_rows_kept', 0):,} | {c.get('ranges', 0):,} | "
            f"{r['bytes'] / 1e9:.2f} | {s(_w(c))} | {gb(c)} | {s(_w(f))} | {s(_w(h))} | {ratio(_w(c), _w(h))} | "
            f"{s(_w(na))} | {gb(na)} | {s(_w(nc))} | {ratio(_w(na), _w(c))} | {ratio(_w(nc), _w(h))} | "
            f"{s(_w(ns))} | {ratio(_w(ns), _w(c))} |")
    return "\n".join(lines)


def stages_table(row: dict) -> str:
    """One input's specprof cold run, step by step."""
    c = row["specprof_cold"]
    lines = ["| step | wall s | CPU s | peak RSS GB |", "|---|---|---|---|"]
    for s in c["steps"]:
        lines.append(f"| {'  ' * s['depth']}{s['step']} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | "
                     f"{s['peak_rss'] / 1e9:.2f} |")
    lines.append(f"| total | {c['wall_s']:.2f} | {c['cpu_s']:.2f} | {c['peak_rss'] / 1e9:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("build", "run", "table"))
    ap.add_argument("--dir", default="/tmp/specprof-bench")
    ap.add_argument("--sizes", default="1,4,16,64")
    ap.add_argument("--nsys-ai", help="the nsys-ai executable (in its own venv)")
    ap.add_argument("--nsys", help="the nsys executable [default: $NSYS, or nsys on PATH]")
    ap.add_argument("--out", help="write the raw results (JSON) here")
    ap.add_argument("--results", help="for `table`: a JSON file written by `run --out`")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.what == "build":
        build(args.dir, sizes)
    elif args.what == "run":
        run(args.dir, sizes, args.nsys_ai, args.out, args.nsys)
    else:
        with open(args.results) as fh:
            result = json.load(fh)
        print(table(result))
        for row in result["rows"]:
            print(f"\nmix{row['size']}, specprof cold, by step:\n")
            print(stages_table(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
