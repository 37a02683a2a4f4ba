"""The application layer: a run loaded once (`Run`, with the one loader of a trace's attribution and its caches),
the one pipeline of outputs for one trace and several (in parallel), the results store, and one function per
command of the console script."""
