"""The one compiled piece: analyzer/readers/_sqlite_pages.c, the nsys reader's direct B-tree page reader.

Optional: where no C compiler is found the install goes on without it, and the reader reads every table
through SQLite (the same rows, slower: docs/performance.md). Built against Python's stable ABI, so one
build serves every Python from 3.11 on.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analyzer.readers._sqlite_pages",
            ["analyzer/readers/_sqlite_pages.c"],
            py_limited_api=True,
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
