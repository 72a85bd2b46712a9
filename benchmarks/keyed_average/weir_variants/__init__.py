"""Weir variants of the keyed-average benchmark (items 1-3 of docs/benchmarks.md), on
``weir.spark.StreamJob``: per-record ``KeyedProcessFunction`` (heap, RocksDB) and vectorized."""
