"""Keys of a runner: the current key of a record, and the encoded keys of a batch or task."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import filterfalse
from typing import Any, Final

from weir._internal import KeyBatch, Session
from weir.exceptions import StateError
from weir.functions import KeyedProcessFunction

__all__ = ["NO_KEY", "Batch", "KeyedContext", "TaskKeys", "outside_keyed_context"]


class NoKey:
    """The current key outside record processing: unhashable, so a cache lookup fails at no cost."""

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<no current key>"


NO_KEY: Final = NoKey()


def outside_keyed_context(name: str) -> StateError:
    return StateError(
        f"keyed state {name!r} was used outside a keyed context: keyed state belongs to the current key "
        "and can only be read or written while a record is processed (in process_element). "
        "Get the state handle in open() and use it per record; for state that belongs to no key "
        "use operator state (implement weir.CheckpointedFunction)."
    )


class KeyedContext(KeyedProcessFunction.Context):
    """The per-record context; its ``key`` is the current key every keyed state reads."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Any = NO_KEY

    def get_current_key(self) -> Any:
        if self.key is NO_KEY:
            raise StateError("there is no current key outside process_element")
        return self.key


class Batch:
    """The distinct keys of one batch and their encoded form."""

    __slots__ = ("_index_of", "distinct", "key_batch", "key_groups", "session")

    def __init__(self, session: Session, distinct: list[Any], key_groups: list[int] | None) -> None:
        self.session = session
        self.distinct = distinct
        self.key_groups = key_groups
        self.key_batch = session.keys(distinct, key_groups)
        self._index_of: dict[Any, int] | None = None

    def rows(self, keys: Iterable[Any]) -> KeyBatch:
        """The encoded keys of a subset of the distinct keys."""
        if self._index_of is None:
            self._index_of = {key: i for i, key in enumerate(self.distinct)}
        index_of = self._index_of
        return self.key_batch.select([index_of[key] for key in keys])


class TaskKeys(Batch):
    """Deferred writes: every key the runner has seen since its last flush, with its key
    group (``None``: Weir computes it); encodes any of them on demand."""

    __slots__ = ("group_of",)

    def __init__(self, session: Session) -> None:
        self.session = session
        self.distinct = []
        self.key_groups = None
        self.group_of: dict[Any, int | None] = {}
        self._index_of = None

    def add(self, keys: Sequence[Any], key_groups: Sequence[int] | None) -> Batch | None:
        """Record the keys of a batch; returns the keys not seen before, encoded (``None``: none)."""
        known = self.group_of
        # Both loops run in C and a known key costs one dict probe: about half
        # the time of `set(keys) - known`, which first builds a set of the batch.
        fresh = dict.fromkeys(filterfalse(known.__contains__, keys))
        if not fresh:
            return None
        if key_groups is None:
            new, groups = list(fresh), None
            known.update(fresh)
        else:
            group_of = {key: group for key, group in zip(keys, key_groups, strict=True) if key in fresh}
            new, groups = list(group_of), list(group_of.values())
            known.update(group_of)
        return Batch(self.session, new, groups)

    def known(self) -> Batch:
        """Every key recorded since the last flush, encoded."""
        keys = list(self.group_of)
        return Batch(self.session, keys, self._groups(keys))

    def rows(self, keys: Iterable[Any]) -> KeyBatch:
        keys = list(keys)
        return self.session.keys(keys, self._groups(keys))

    def _groups(self, keys: list[Any]) -> list[int] | None:
        """The key groups given with ``keys``; ``None`` when one was not given: then Weir
        computes every group."""
        group_of = self.group_of
        groups = [group for key in keys if (group := group_of[key]) is not None]
        return groups if len(groups) == len(keys) else None
