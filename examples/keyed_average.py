"""The keyed-average workload of docs/benchmarks.md as a Weir function.

Events ``i = 0 .. N-1`` carry ``key = (i * 2654435761) mod K`` and
``value = i mod 1000``. Keyed by ``key``, one value state ``(count, sum)``
per key; on each event ``count += 1, sum += value``, and when ``count ==
window`` the function emits ``(key, sum // count)`` and clears the key's
state. :func:`expected` computes the exact output count and checksum (the
sum of all emitted averages) with a plain Python loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueState, ValueStateDescriptor

KEY_MULTIPLIER = 2654435761


class KeyedAverage(KeyedProcessFunction):
    """Emits ``(key, sum // count)`` every ``window`` events of a key."""

    def __init__(self, window: int = 10) -> None:
        self.window = window

    def open(self, runtime_context: RuntimeContext) -> None:
        self.acc: ValueState[tuple[int, int]] = runtime_context.get_state(
            ValueStateDescriptor("acc", Types.TUPLE([Types.LONG(), Types.LONG()]))
        )

    def process_element(self, value: tuple[int, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        count, total = self.acc.value() or (0, 0)
        count += 1
        total += value[1]
        if count == self.window:
            self.acc.clear()
            yield value[0], total // count
        else:
            self.acc.update((count, total))


class FailingOnce(KeyedProcessFunction):
    """Runs ``inner`` but fails its task once, part-way through its input.

    The first task to reach record number ``after`` of its attempt raises
    (its earlier records already changed state); a marker file makes the
    failure happen exactly once across retries, restores and processes. With
    ``armed_by``, tasks fail only once that file exists (the driver creates
    it, e.g. after the first checkpoint, so recovery restores real state).
    """

    def __init__(
        self, inner: KeyedProcessFunction, marker: str, after: int = 1000, armed_by: str | None = None
    ) -> None:
        self.inner = inner
        self.marker = marker
        self.after = after
        self.armed_by = armed_by
        self.seen = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.inner.open(runtime_context)
        self.seen = 0

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        self.seen += 1
        if self.seen == self.after and (self.armed_by is None or os.path.exists(self.armed_by)):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                raise RuntimeError(f"injected failure after {self.after} records")
        yield from self.inner.process_element(value, ctx)

    def close(self) -> None:
        self.inner.close()


def expected(n: int, keys: int, window: int = 10) -> tuple[int, int]:
    """``(output count, sum of emitted averages)`` for ``n`` events over ``keys`` keys."""
    counts = [0] * keys
    sums = [0] * keys
    outputs = checksum = 0
    for i in range(n):
        key = (i * KEY_MULTIPLIER) % keys
        counts[key] += 1
        sums[key] += i % 1000
        if counts[key] == window:
            outputs += 1
            checksum += sums[key] // window
            counts[key] = sums[key] = 0
    return outputs, checksum


if __name__ == "__main__":
    print(expected(2_000_000, 100_000))  # (200000, 99900000)
