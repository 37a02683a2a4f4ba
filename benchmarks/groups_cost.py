"""What grouping the economics by batch size and K (derived/groups.py) adds to an analysis: `specprof analyze RUN
--baseline PLAIN --json --no-cache` in this process, with the grouping (default) or with `economics_groups` replaced
by one that groups nothing (`--without-groups`). Compare the two side by side in fresh processes (docs/performance.md,
"Grouping by batch size and K"):

    farm-bench -n 9 --timeout 600 --vs 'python3 benchmarks/groups_cost.py --without-groups RUN PLAIN' -- \
        python3 benchmarks/groups_cost.py RUN PLAIN

It also prints, on stderr, the CPU seconds spent inside `economics_groups` (0 with --without-groups).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("plain")
    ap.add_argument("--without-groups", action="store_true")
    args = ap.parse_args()
    from specprof.analyzer.derived import groups as gr
    from specprof.analyzer.cli import main as cli

    spent = [0.0]
    real = gr.economics_groups

    def timed(*a, **k):
        t = time.process_time()
        try:
            return None if args.without_groups else real(*a, **k)
        finally:
            spent[0] += time.process_time() - t

    gr.economics_groups = timed
    try:
        cli.main(["analyze", args.run, "--baseline", args.plain, "--json", "--no-cache", "-q"], standalone_mode=False)
    finally:
        print(f"economics_groups: {spent[0]:.4f} CPU s", file=sys.stderr)


if __name__ == "__main__":
    main()
