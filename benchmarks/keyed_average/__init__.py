"""The "keyed-average" benchmark of docs/benchmarks.md: Weir variants against Spark peers and ceilings.

Every variant runs in its own child process (its own SparkSession and JVM) over the same
generated Parquet files, so peak memory is per variant and one crashing variant cannot take
the others down. ``benchmarks/run.py`` is the entry point; ``registry.py`` lists the variants.
"""
