"""What specprof prints and writes, for every fixture, dumped into one folder so that two trees can be compared
(a refactoring must leave them the same):

    python3 scripts/dump_outputs.py dump TREE OUT [FIXTURE ...]   # TREE's code, run on TREE's fixtures, into OUT
    python3 scripts/dump_outputs.py compare OUT_A OUT_B           # each file: identical, or how it differs

For each fixture: `analyze` (terminal, JSON, CSV, the results store's rows), `report` (the report's data and a
hash of the page around it), `export` (a hash of the Perfetto file) and `analyze` of the trace file inside the
run directory; then the third-party traces of ../shared/traces, several traces at once (with run options kept
and refused), compare, sweep (also of stored runs) and baselines. In-process (click's CliRunner), with a cache
folder of its own; TREE's path is written ROOT. `compare` ignores the report's generation time and lists apart
the files whose numbers differ only past their 12th significant digit.
"""

from __future__ import annotations

import base64
import glob
import gzip
import hashlib
import os
import re
import sqlite3
import sys
import tempfile
import traceback

SHARED = "/work/shared/traces"
NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


class Dump:
    def __init__(self, tree: str, out: str):
        self.tree, self.out = os.path.abspath(tree), os.path.abspath(out)
        self.work = tempfile.mkdtemp(prefix="dump-work-")
        os.makedirs(self.out, exist_ok=True)
        os.chdir(self.tree)
        sys.path.insert(0, self.tree)
        os.environ["SPECPROF_CACHE_DIR"] = tempfile.mkdtemp(prefix="dump-cache-")
        from click.testing import CliRunner

        from specprof.analyzer.cli import main

        self.runner, self.main = CliRunner(), main

    def clean(self, text: str) -> str:
        return text.replace(self.tree, "ROOT").replace(self.work, "WORK")

    def put(self, name: str, text: str) -> None:
        with open(os.path.join(self.out, name), "w", encoding="utf-8") as fh:
            fh.write(self.clean(text))

    def cli(self, name: str, *args) -> None:
        r = self.runner.invoke(self.main, [str(a) for a in args], catch_exceptions=True)
        text = f"exit {r.exit_code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n"
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            text += "--- exception\n" + "".join(traceback.format_exception(r.exception))
        self.put(name, text)

    def files(self, name: str, folder: str) -> None:
        lines = []
        for path in sorted(glob.glob(os.path.join(folder, "**", "*"), recursive=True)):
            if os.path.isfile(path):
                data = open(path, "rb").read()
                rel = os.path.relpath(path, folder)
                lines.append(f"=== {rel}\n{data.decode()}" if path.endswith(".csv") else
                             f"=== {rel} sha256 {hashlib.sha256(data).hexdigest()}")
        self.put(name, "\n".join(lines) + "\n")

    def db(self, name: str, path: str) -> None:
        if not os.path.exists(path):
            return self.put(name, "absent\n")
        lines = []
        with sqlite3.connect(path) as conn:
            for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
                cur = conn.execute(f"SELECT * FROM [{t}]")
                cols = [d[0] for d in cur.description]
                skip = {i for i, c in enumerate(cols) if c in ("imported_at", "at", "argv")}
                rows = sorted(repr([v for i, v in enumerate(r) if i not in skip]) for r in cur)
                lines.append(f"=== {t} {cols}\n" + "\n".join(rows))
        self.put(name, "\n".join(lines) + "\n")

    def file(self, name: str, path: str) -> None:
        if not os.path.exists(path):
            return self.put(name, "absent\n")
        data = open(path, "rb").read()
        if not path.endswith(".html"):
            return self.put(name, hashlib.sha256(data).hexdigest() + "\n")
        text = data.decode()  # the report's data in full, and a hash of the page around it (plotly, the app)
        m = re.search(r'<script type="application/(json|gzip;base64)" id="specprof-data">', text)
        end = text.index("</script>", m.end())
        body = text[m.end():end]
        if m.group(1) != "json":
            body = gzip.decompress(base64.b64decode(body)).decode()
        rest = self.clean(text[:m.start()] + text[end:]).encode()
        self.put(name, body + "\n" + hashlib.sha256(rest).hexdigest() + "\n")

    def fixture(self, fx: str) -> None:
        n, w = os.path.basename(fx), os.path.join(self.work, os.path.basename(fx))
        self.cli(f"{n}.txt", "analyze", fx, "--show-cycles", "1000", "-q")
        self.cli(f"{n}.json", "analyze", fx, "--json", "-q")
        self.cli(f"{n}.csv.out", "analyze", fx, "--csv", f"{w}/csv", "-q")
        self.files(f"{n}.csv", f"{w}/csv")
        self.cli(f"{n}.db.out", "analyze", fx, "--db", f"{w}/runs.db", "-q")
        self.db(f"{n}.db", f"{w}/runs.db")
        self.cli(f"{n}.report.out", "report", fx, "-o", f"{w}/report.html")
        self.file(f"{n}.report", f"{w}/report.html")
        self.cli(f"{n}.export.out", "export", fx, "--perfetto", f"{w}/trace.perfetto")
        self.file(f"{n}.export", f"{w}/trace.perfetto")
        for inner in sorted(glob.glob(f"{fx}/*.sqlite") + glob.glob(f"{fx}/*.json.gz")):
            m = os.path.basename(inner)
            self.cli(f"{n}--{m}.txt", "analyze", inner, "-q")
            self.cli(f"{n}--{m}.json", "analyze", inner, "--json", "-q")

    def the_rest(self) -> None:
        shared = sorted(glob.glob(f"{SHARED}/*/*.sqlite") + glob.glob(f"{SHARED}/*/*.json.gz"))
        for p in shared:
            self.cli(f"shared--{os.path.basename(p)}.txt", "analyze", p, "-q")
            self.cli(f"shared--{os.path.basename(p)}.json", "analyze", p, "--json", "-q")
        k0, k2, k4, k6 = (f"fixtures/reference-k{k}" for k in (0, 2, 4, 6))
        w = self.work
        self.cli("several.txt", "analyze", k4, k2, "-q")
        self.cli("several.json", "analyze", k4, k2, "--json", "-q")
        self.cli("several.csv.out", "analyze", k4, k2, "--csv", f"{w}/several-csv", "-q")
        self.files("several.csv", f"{w}/several-csv")
        self.cli("several.db.out", "analyze", k4, k2, "--db", f"{w}/several.db", "-q")
        self.db("several.db", f"{w}/several.db")
        self.cli("several-baseline-ms.json", "analyze", k4, k2, "--baseline-ms", "5", "--json", "-q")
        self.cli("several-server-log.txt", "analyze", k4, k2, "--server-log", "/nonexistent", "-q")
        self.cli("several-shared.txt", "analyze", *shared[:4], "-q")
        self.cli("compare.txt", "compare", k2, k4)
        self.cli("compare.json", "compare", k2, k4, "--json")
        self.cli("sweep.txt", "sweep", k2, k4, k6)
        self.cli("sweep.json", "sweep", k2, k4, k6, "--json")
        self.cli("store-import.out", "analyze", k2, k4, k6, "--db", f"{w}/sweep.db", "-q")
        self.cli("sweep-stored.json", "sweep", "@1", "@2", "@3", "--db", f"{w}/sweep.db", "--json")
        self.cli("compare-stored.json", "compare", "@1", k4, "--db", f"{w}/sweep.db", "--json")
        self.cli("baseline-run.json", "analyze", k4, "--baseline", k0, "--json", "-q")
        self.cli("baseline-trace.json", "analyze", k4, "--baseline", f"{k0}/run.sqlite", "--json", "-q")
        self.cli("server-log.json", "analyze", "fixtures/sglang-k4", "--server-log", "fixtures/sglang-k4/server.log",
                 "--json", "-q")
        # runs made without nsys, on their own
        dense = [f"fixtures/sglang-dense-k{k}/no-nsys" for k in (1, 2, 3, 4, 6)]
        plain = "fixtures/sglang-dense-plain/no-nsys"
        self.cli("no-nsys.txt", "analyze", dense[3], "--baseline", plain, "-q")
        self.cli("no-nsys.json", "analyze", dense[3], "--baseline", plain, "--json", "-q")
        self.cli("no-nsys-compare.txt", "compare", dense[1], dense[3])
        self.cli("no-nsys-sweep.json", "sweep", *dense, "--baseline", plain, "--json")


def dump(tree: str, out: str, only: list[str]) -> None:
    d = Dump(tree, out)
    for fx in sorted(p for p in glob.glob("fixtures/*") if os.path.isdir(p)):
        if not only or os.path.basename(fx) in only:
            print(fx, flush=True)
            d.fixture(fx)
    if not only:
        d.the_rest()


def compare(a_dir: str, b_dir: str) -> None:
    same = close = 0
    for name in sorted(set(os.listdir(a_dir)) | set(os.listdir(b_dir))):
        pa, pb = os.path.join(a_dir, name), os.path.join(b_dir, name)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print("only in one:", name)
            continue
        ta, tb = (re.sub(r'"generated":"[^"]*"', "", open(p, encoding="utf-8").read()) for p in (pa, pb))
        if ta == tb:
            same += 1
            continue
        fa, fb = NUMBER.findall(ta), NUMBER.findall(tb)
        if NUMBER.sub("#", ta) == NUMBER.sub("#", tb) and all(
                x == y or abs(float(x) - float(y)) <= 1e-12 * max(abs(float(x)), abs(float(y))) for x, y in zip(fa, fb)):
            print(f"numbers past their 12th digit ({sum(x != y for x, y in zip(fa, fb))}):", name)
            close += 1
            continue
        print("different:", name)
    print(f"{same} identical, {close} differing only past the 12th significant digit")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
