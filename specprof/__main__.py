"""`python3 -m specprof`: the `specprof` console script."""

from specprof.analyzer.cli import main

main()
