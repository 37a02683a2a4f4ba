"""The Nsight Systems SQLite export reader (nsys 2021.x to 2026.x): an export -> a Trace.

Its public interface is what this module exports; its modules' names without a leading underscore are the package's
own interface between them, and no module outside the package uses a private one (tests/test_reader_interface.py).

- tables.py: each nsys table the reader reads, described once (`Table`); every read of it is made from that
- select.py: one read of one table (`Select`), as both read paths take it, and the text it gives
- pages.py: the direct page reader (the C module `_sqlite_pages`; the only module that touches it)
- export.py: an open export (`Export`): its tables, and their rows read from the pages or through SQLite
- read.py: the whole export, or one process's rows, read into a Trace (`read_nsys_sqlite`)
- window.py: the part of an export a window keeps (`read_window`)
- per_process.py: the processes of an export, and one walk that hands each its rows (`split`)

Which way the large tables are read is each read's argument (`pages`: True for the pages where the page reader
takes them, False for SQLite); a read that names none reads the pages unless $SPECPROF_SQLITE_PAGES is 0.
"""

from specprof.analyzer.readers.nsys.export import Export
from specprof.analyzer.readers.nsys.pages import built as page_reader_built
from specprof.analyzer.readers.nsys.per_process import Split, processes, rows_to_walk, split
from specprof.analyzer.readers.nsys.read import large_reads, read_nsys_sqlite, read_strings
from specprof.analyzer.readers.nsys.select import Select
from specprof.analyzer.readers.nsys.tables import PID_MASK
from specprof.analyzer.readers.nsys.window import Whole, read_window

__all__ = ["Export", "PID_MASK", "Select", "Split", "Whole", "large_reads", "page_reader_built", "processes",
           "read_nsys_sqlite", "read_strings", "read_window", "rows_to_walk", "split"]
