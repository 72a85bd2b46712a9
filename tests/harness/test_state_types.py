"""Every keyed state kind and value type through the harness, on both backends and across a restore."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from weir import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    RuntimeContext,
    StateTtlConfig,
    Types,
    ValueStateDescriptor,
)
from weir.testing import KeyedOperatorHarness


class Average(AggregateFunction[float, tuple[float, int], float]):
    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, accumulator: tuple[float, int]) -> tuple[float, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[float, int]) -> float:
        return accumulator[0] / accumulator[1]


class Blob:
    """An opaque, picklable object."""

    def __init__(self, tags: set[str]) -> None:
        self.tags = tags

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other.tags == self.tags

    def __hash__(self) -> int:
        return hash(frozenset(self.tags))


class EveryState(KeyedProcessFunction):
    """Writes each record into every kind of state; outputs what it read before writing."""

    def open(self, runtime_context: RuntimeContext) -> None:
        ttl = StateTtlConfig.new_builder(60_000).build()
        last = ValueStateDescriptor("last", Types.STRING())
        last.enable_time_to_live(ttl)
        self.last = runtime_context.get_state(last)
        self.count = runtime_context.get_state(ValueStateDescriptor("count", pa.int64(), default_value=0))
        self.history = runtime_context.get_list_state(ListStateDescriptor("history", Types.INT()))
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen", Types.STRING(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.DOUBLE())
        )
        self.mean = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("mean", Average(), Types.TUPLE([Types.DOUBLE(), Types.LONG()]))
        )
        self.blob = runtime_context.get_state(ValueStateDescriptor("blob", Types.PICKLED_BYTE_ARRAY()))
        self.raw = runtime_context.get_state(ValueStateDescriptor("raw", Types.PRIMITIVE_ARRAY(Types.BYTE())))
        self.nested = runtime_context.get_state(
            ValueStateDescriptor(
                "nested",
                pa.struct(
                    [
                        pa.field("flag", pa.bool_(), nullable=False),
                        ("ratio", pa.float32()),
                        ("names", pa.list_(pa.string())),
                    ]
                ),
            )
        )

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key, n = value
        yield {
            "key": ctx.get_current_key(),
            "last": self.last.value(),
            "count": self.count.value(),
            "history": list(self.history.get()),
            "seen": dict(self.seen.items()),
            "total": self.total.get(),
            "mean": self.mean.get(),
            "blob": self.blob.value(),
            "raw": self.raw.value(),
            "nested": self.nested.value(),
        }
        self.last.update(f"{key}-{n}")
        self.count.update(self.count.value() + 1)
        self.history.add(n)
        self.seen.put(f"n{n}", n * 10)
        if n % 3 == 0:
            self.seen.remove(f"n{n}")
        self.total.add(float(n))
        self.mean.add(float(n))
        blob = self.blob.value() or Blob(set())
        self.blob.update(Blob(blob.tags | {str(n)}))
        self.raw.update((self.raw.value() or b"") + bytes([n]))
        self.nested.update((n % 2 == 0, n / 2, [key] * (n % 3) + [None]))


def expected_after(key: str, ns: list[int]) -> dict[str, Any]:
    """What EveryState reports for `key` after processing `ns`."""
    seen = {}
    for n in ns:
        seen[f"n{n}"] = n * 10
        if n % 3 == 0:
            del seen[f"n{n}"]
    last_n = ns[-1] if ns else None
    return {
        "key": key,
        "last": None if last_n is None else f"{key}-{last_n}",
        "count": len(ns),
        "history": ns,
        "seen": seen,
        "total": float(sum(ns)) if ns else None,
        "mean": sum(ns) / len(ns) if ns else None,
        "blob": Blob({str(n) for n in ns}) if ns else None,
        "raw": bytes(ns) if ns else None,
        "nested": None if last_n is None else (last_n % 2 == 0, last_n / 2, [key] * (last_n % 3) + [None]),
    }


RECORDS = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("a", 5), ("b", 6), ("c", 7), ("a", 8)]


def check_outputs(
    outputs: list[dict[str, Any]], records: list[tuple[str, int]], before: dict[str, list[int]]
) -> None:
    seen = {k: list(v) for k, v in before.items()}
    for output, (key, n) in zip(outputs, records, strict=True):
        assert output == expected_after(key, seen.get(key, [])), (key, n)
        seen.setdefault(key, []).append(n)


def test_every_state_kind_round_trips(backend: str) -> None:
    with KeyedOperatorHarness(EveryState(), key_selector=lambda v: v[0], parallelism=2, backend=backend) as h:
        # One batch per call, several records per key per batch, then more batches.
        check_outputs(h.process_elements(RECORDS[:5]), RECORDS[:5], {})
        check_outputs(h.process_elements(RECORDS[5:]), RECORDS[5:], {"a": [1, 3, 5], "b": [2], "c": [4]})
        assert h.state("a", "history") == [1, 3, 5, 8]
        assert h.state("a", "seen") == {"n1": 10, "n5": 50, "n8": 80}
        assert h.state("b", "mean") == 4.0
        assert h.state("zzz", "count") == 0  # the default of an absent value
        assert h.state("zzz", "history") == []
        assert h.state("zzz", "seen") == {}


def test_every_state_kind_survives_a_restore_and_rescale(backend: str, tmp_path: Path) -> None:
    with KeyedOperatorHarness(EveryState(), key_selector=lambda v: v[0], parallelism=2, backend=backend) as h:
        h.process_elements(RECORDS[:5])
        savepoint = h.snapshot(tmp_path)
    other = "rocksdb" if backend == "heap" else "heap"
    with KeyedOperatorHarness(
        EveryState(), key_selector=lambda v: v[0], parallelism=3, backend=other, restore_from=savepoint
    ) as h3:
        check_outputs(h3.process_elements(RECORDS[5:]), RECORDS[5:], {"a": [1, 3, 5], "b": [2], "c": [4]})


class ListAndMapOps(KeyedProcessFunction):
    """Exercises update/clear/add_all, put_all/contains/keys/values/is_empty in one batch."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.items = runtime_context.get_list_state(ListStateDescriptor("items", Types.STRING()))
        self.index = runtime_context.get_map_state(
            MapStateDescriptor(
                "index", Types.TUPLE([Types.INT(), Types.STRING()]), Types.PICKLED_BYTE_ARRAY()
            )
        )

    def process_element(self, value: tuple[int, str], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        op = value[1]
        if op == "add":
            self.items.add_all(["x", "y"])
            self.index.put_all({(1, "x"): {"any": "object"}, (2, "y"): [1, 2]})
        elif op == "replace":
            self.items.update(["z"])
            self.items.add("w")
            self.index.remove((1, "x"))
        elif op == "clear":
            self.items.clear()
            self.index.clear()
        yield (
            list(self.items.get()),
            sorted(self.index.keys()),
            self.index.contains((2, "y")),
            self.index.is_empty(),
            len(list(self.index.values())),
        )


def test_list_and_map_operations_within_and_across_batches(backend: str) -> None:
    with KeyedOperatorHarness(ListAndMapOps(), key_selector=lambda v: v[0], backend=backend) as h:
        assert h.process_elements([(7, "add"), (7, "replace"), (7, "add")]) == [
            (["x", "y"], [(1, "x"), (2, "y")], True, False, 2),
            (["z", "w"], [(2, "y")], True, False, 1),
            (["z", "w", "x", "y"], [(1, "x"), (2, "y")], True, False, 2),
        ]
        assert h.state(7, "items") == ["z", "w", "x", "y"]
        assert h.process_elements([(7, "noop"), (7, "clear")]) == [
            (["z", "w", "x", "y"], [(1, "x"), (2, "y")], True, False, 2),
            ([], [], False, True, 0),
        ]
        assert h.state(7, "index") == {}
        h.process_elements([(7, "add")])
        assert h.state(7, "index") == {(1, "x"): {"any": "object"}, (2, "y"): [1, 2]}


@pytest.mark.parametrize(
    ("key", "other"),
    [
        (10**12, 3),
        ("user-1", "user-2"),
        (b"\x00k", b"\x01k"),
        (True, False),
        (1.5, -2.0),
        ((1, "eu"), (2, "us")),
    ],
)
def test_key_types(key: Any, other: Any, backend: str) -> None:
    class Counter(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.LONG(), default_value=0))

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
            self.n.update(self.n.value() + 1)
            yield ctx.get_current_key(), self.n.value()

    with KeyedOperatorHarness(Counter(), key_selector=lambda v: v, parallelism=3, backend=backend) as h:
        assert h.process_elements([key, other, key]) == [(key, 1), (other, 1), (key, 2)]
        assert h.state(key, "n") == 2
