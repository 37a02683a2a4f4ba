"""The application layer: the one loader from a path to an Analysis (with its caches), several traces in parallel,
the results store, and one function per command of the console script."""
