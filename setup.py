"""The compiled pieces, both optional: analyzer/readers/nsys/_sqlite_pages.c (the nsys reader's direct B-tree page
reader) and analyzer/_scan.c (one pass over the ops per group: running max of ends, union lengths).

Where no C compiler is found the install goes on without them, and specprof does the same work in polars
and SQLite (the same results, slower: docs/performance.md). Built against Python's stable ABI, so one build
serves every Python from 3.11 on.
"""
from setuptools import Extension, setup

_COMMON = dict(
    py_limited_api=True,
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    include_dirs=["analyzer"],
    depends=["analyzer/_arrow.h"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=True,
)

setup(
    ext_modules=[
        Extension("specprof.analyzer.readers.nsys._sqlite_pages", ["analyzer/readers/nsys/_sqlite_pages.c"], **_COMMON),
        Extension("specprof.analyzer._scan", ["analyzer/_scan.c"], **_COMMON),
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
