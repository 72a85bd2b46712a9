"""Weir variants of the keyed-average benchmark (items 1-3 of docs/BENCHMARKS.md).

Not registered yet: add ``"benchmarks.keyed_average.weir_variants.per_record"`` and
``"benchmarks.keyed_average.weir_variants.vectorized"`` to ``VARIANT_MODULES`` in
``registry.py`` once ``weir.spark`` exists and these run.
"""
