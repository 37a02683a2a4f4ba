"""An Nsight Systems report (`.nsys-rep`) given alone -> the path of its SQLite export, made with nsys.

specprof reads nsys's SQLite export, not the report. When the user names a report, nsys (`$SPECPROF_NSYS`, else
what `specprof capture` would use: `$NSYS`, `nsys` on PATH, the standard install folders) exports it:

- by default into the cache (readers/trace_cache.py): the folder of the report's cache entry holds `export.sqlite`
  and `key.json` (the report's real path, size, modification time and the SHA-256 of its first and last 64 KiB),
  so the next analysis of the same report skips the export, `specprof cache info` counts it and the size bound
  evicts it like any other entry;
- with `here`, beside the report (`RUN.nsys-rep` -> `RUN.sqlite`), as `nsys export` itself would name it;
- without the cache (`--no-cache`) and without `here`, into a temporary folder removed when the process ends.

An export already beside the report and newer than it is used as it is. Without nsys the report is returned
unchanged: the nsys reader then says, in one line, how to export it by hand.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from specprof.analyzer import progress, safe_files
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers import trace_cache

SUFFIX = ".nsys-rep"
EXPORT = "export.sqlite"
KEY = "key.json"
SCHEMA = "specprof.export/1"


def is_report(path: str) -> bool:
    return path.endswith(SUFFIX) and os.path.isfile(path)


def find_nsys() -> str | None:
    """$SPECPROF_NSYS, else capture's search ($NSYS, PATH, the install folders); None when there is none."""
    given = os.environ.get("SPECPROF_NSYS")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise SpecprofError(f"$SPECPROF_NSYS is {given!r}, which is not an executable nsys; fix it or leave it "
                            "unset")
    from specprof.tracer import capture  # the same search as `specprof capture`

    try:
        return str(capture.find_nsys())
    except SpecprofError:
        return None


def _key(report: str) -> dict:
    key = trace_cache.key(report)
    key.pop("code", None)  # nsys's export does not change with specprof's code
    return {**key, "schema": SCHEMA}


def _export(nsys: str, report: str, out: str) -> None:
    """`nsys export --type sqlite -o TMP REPORT`, TMP in a folder of our own beside OUT (made by mkdtemp: no one
    else can plant a link in it), then renamed to OUT: an interrupted export never leaves a partial OUT, and a
    link at OUT is refused, never written through."""
    folder = os.path.dirname(os.path.abspath(out))
    try:
        private = tempfile.mkdtemp(prefix=".export-", dir=folder)
    except OSError as exc:
        raise SpecprofError(f"{folder}: cannot write the export of {report} there ({exc.strerror})", report) from None
    tmp = os.path.join(private, "export.sqlite")
    argv = [nsys, "export", "--type", "sqlite", "-o", tmp, report]
    try:
        try:
            with progress.step("exporting the report with nsys"):
                done = subprocess.run(argv, capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise SpecprofError(f"{report}: could not run {nsys} to export it ({exc.strerror})", report) from None
        if done.returncode != 0 or not os.path.isfile(tmp):
            said = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
            raise SpecprofError(f"{report}: `nsys export --type sqlite` failed (exit {done.returncode}"
                                + (f": {said[-1][:200]}" if said else "") + "); is it a whole Nsight Systems "
                                "report?", report)
        try:
            safe_files.put(tmp, out)
        except OSError as exc:
            raise SpecprofError(f"{out}: cannot put the export there ({exc.strerror})", out) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _say(line: str) -> None:
    print(f"specprof: {line}", file=sys.stderr)


def exported(path: str, here: bool = False, cache: bool = True) -> str:
    """The SQLite export to analyse for `path`: `path` itself unless it is a `.nsys-rep` report, else its export
    (module docstring). An export made, or one found beside the report, is named in a line on stderr."""
    if not is_report(path):
        return path
    beside = path[: -len(SUFFIX)] + ".sqlite"
    if os.path.isfile(beside) and os.path.getmtime(beside) >= os.path.getmtime(path):
        _say(f"{path}: analysing its export beside it, {beside}")
        return beside
    nsys = find_nsys()
    if nsys is None:
        return path
    if here:
        if os.path.exists(beside):
            raise SpecprofError(f"{beside}: already there and older than {os.path.basename(path)}; remove it to "
                                "export the report again, or analyse it as it is", beside)
        _export(nsys, path, beside)
        _say(f"{path}: exported with {nsys} to {beside}")
        return beside
    if not cache:
        folder = tempfile.mkdtemp(prefix="specprof-export-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        out = os.path.join(folder, os.path.basename(beside))
        _export(nsys, path, out)
        _say(f"{path}: exported with {nsys} to {out} (removed when specprof ends)")
        return out
    folder = trace_cache.location(path)
    out = os.path.join(folder, EXPORT)
    want = _key(path)
    try:
        with open(os.path.join(folder, KEY), encoding="utf-8") as fh:
            if json.load(fh).get("key") == want and os.path.isfile(out):
                _say(f"{path}: analysing its export in the cache, {out}")
                return out
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    try:  # the cache root is the user's; its `traces` folder and the entry are never reached through a link
        safe_files.make_folders(os.path.dirname(os.path.dirname(folder)))
        for level in (os.path.dirname(folder), folder):
            os.close(safe_files.own_folder(level))
    except OSError as exc:
        raise SpecprofError(f"{folder}: cannot make the cache folder to export {path} into ({exc.strerror}); "
                            "give --export-here to export beside the report", path) from None
    _export(nsys, path, out)
    try:
        safe_files.replace(os.path.join(folder, KEY), json.dumps({"key": want}))
        safe_files.replace(os.path.join(folder, trace_cache.USED), str(time.time_ns()))
    except OSError:
        pass  # the export is there; the next analysis exports again
    _say(f"{path}: exported with {nsys} into the cache, {out}")
    trace_cache.evict(keep=folder)
    return out
