"""The data model: the Trace every reader produces, the labels the analysis gives, and the column primitives
the analyses run on (polars, and the optional C scan)."""
