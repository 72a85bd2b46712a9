"""Flink's ``CountWindowAverage`` state example, on Weir.

A keyed function keeps ``(count, sum)`` per key in a ``ValueState``; every
second element of a key it emits ``(key, sum // count)`` and starts over.
Run it (in-process, through the test harness)::

    python examples/count_window_average.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueState, ValueStateDescriptor


class CountWindowAverage(KeyedProcessFunction):
    """Emits the integer average of each key's values in count windows of two."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sum: ValueState[tuple[int, int]] = runtime_context.get_state(
            ValueStateDescriptor("average", Types.TUPLE([Types.LONG(), Types.LONG()]))
        )

    def process_element(self, value: tuple[Any, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        count, total = self.sum.value() or (0, 0)
        count += 1
        total += value[1]
        if count >= 2:
            yield ctx.get_current_key(), total // count
            self.sum.clear()
        else:
            self.sum.update((count, total))


def main() -> None:
    """Run the example through the in-process harness and print the outputs."""
    from weir.testing import KeyedOperatorHarness

    with KeyedOperatorHarness(CountWindowAverage(), key_selector=lambda v: v[0], parallelism=2) as h:
        h.process_elements([(1, 3), (1, 5), (1, 7), (1, 4), (1, 2)])
        print(h.outputs())  # [(1, 4), (1, 5)]


if __name__ == "__main__":
    main()
