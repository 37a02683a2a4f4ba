"""The Kineto reader's nesting-depth guard (analyzer/readers/kineto.py `_Depth`) at two revisions, side by side.

The guard of REV (default: the last commit whose reader used regular expressions for it) and the working tree's
are loaded as modules, and each is fed the same decompressed text in 16 KiB chunks (the reader's read size),
in turns, `--repeats` times; then whole `read_kineto` runs of each module, in turns. The text is a real trace
(the largest shared one) replicated `--copies` times by benchmarks/make_large_kineto.py. Prints seconds and
ratios; asserts nothing.

    python3 benchmarks/kineto_depth.py --copies 20 --repeats 3
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _module(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _guard_seconds(module, text: bytes, chunk: int) -> float:
    t0 = time.process_time()
    depth = module._Depth(module.MAX_DEPTH)
    for at in range(0, len(text), chunk):
        if not depth.fits(text[at:at + chunk]):
            raise AssertionError("the guard refused a real trace")
    return time.process_time() - t0


def _read_seconds(module, path: str) -> float:
    t0 = time.process_time()
    module.read_kineto(path)
    return time.process_time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the revision to compare with (git)")
    ap.add_argument("--trace", default="/work/shared/traces/torch_kineto/"
                    "hta_trace_diff__control__control.json.gz")
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    old_source = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.rev}:analyzer/readers/kineto.py"],
                                capture_output=True, text=True, check=True).stdout
    old = _module(old_source, "kineto_before")
    new = _module((ROOT / "analyzer/readers/kineto.py").read_text(), "kineto_after")
    with tempfile.TemporaryDirectory() as tmp:
        replica = os.path.join(tmp, "replica.json")
        subprocess.run([sys.executable, str(ROOT / "benchmarks/make_large_kineto.py"), args.trace, replica,
                        "--copies", str(args.copies)], check=True, capture_output=True)
        text = Path(replica).read_bytes()
        print(f"{args.trace} x{args.copies}: {len(text) / 1e6:.0f} MB of JSON")
        guard = {"before": [], "after": []}
        read = {"before": [], "after": []}
        for _ in range(args.repeats):
            for label, module in (("before", old), ("after", new)):
                guard[label].append(_guard_seconds(module, text, module.READ_SIZE))
            for label, module in (("before", old), ("after", new)):
                read[label].append(_read_seconds(module, replica))
    for what, runs in (("depth guard alone", guard), ("read_kineto", read)):
        b, a = statistics.median(runs["before"]), statistics.median(runs["after"])
        print(f"{what}: before {b:.2f} CPU s, after {a:.2f} CPU s (median of {args.repeats}): {b / a:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
