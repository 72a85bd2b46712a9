"""Spark peers and ceilings of the keyed-average benchmark (items 4-8 of docs/benchmarks.md)."""
