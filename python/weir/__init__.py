"""Weir: Flink-grade managed keyed state and asynchronous barrier checkpoints for PySpark.

Weir keeps keyed and operator state for PySpark jobs in a Rust engine and
checkpoints it consistently while the job runs. State is partitioned into key
groups exactly as Flink does, using Spark's own ``hash`` so that the JVM, the
local test harness and the ``weir`` command-line tool agree on where a key
lives.

Examples:
    >>> import weir
    >>> weir.key_group_range(128, 3, 1)
    KeyGroupRange(start=43, end=86)
    >>> weir.key_group_of(42, types=["long"]) in weir.key_group_range(128, 1, 0)
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from weir._internal import __version__

if TYPE_CHECKING:
    from weir.config import CheckpointConfig, StateBackend, TlsFiles
    from weir.exceptions import WeirError
    from weir.functions import (
        BatchContext,
        BatchState,
        CheckpointedFunction,
        CheckpointListener,
        FunctionInitializationContext,
        FunctionSnapshotContext,
        KeyedProcessFunction,
        ProcessFunction,
        RawKeyedStateOutput,
        RawOperatorStateOutput,
        RuntimeContext,
        VectorizedKeyedFunction,
    )
    from weir.key_groups import KeyGroupRange, key_group_of, key_group_range, subtask_of
    from weir.state import (
        AggregateFunction,
        AggregatingState,
        AggregatingStateDescriptor,
        BroadcastState,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReduceFunction,
        ReducingState,
        ReducingStateDescriptor,
        StateTtlConfig,
        ValueState,
        ValueStateDescriptor,
    )
    from weir.types import PICKLE, Types

# The module of each public name. ``import weir`` loads none of them (nor pyarrow,
# which they import): a name loads its module on first use (PEP 562). The state host
# is a Python process that needs only ``weir._internal``; started by the first task
# of a job on each executor, it must not spend a tenth of a second importing Arrow.
_EXPORTS: dict[str, str] = {
    "CheckpointConfig": "weir.config",
    "StateBackend": "weir.config",
    "TlsFiles": "weir.config",
    "WeirError": "weir.exceptions",
    "BatchContext": "weir.functions",
    "BatchState": "weir.functions",
    "CheckpointedFunction": "weir.functions",
    "CheckpointListener": "weir.functions",
    "FunctionInitializationContext": "weir.functions",
    "FunctionSnapshotContext": "weir.functions",
    "KeyedProcessFunction": "weir.functions",
    "ProcessFunction": "weir.functions",
    "RawKeyedStateOutput": "weir.functions",
    "RawOperatorStateOutput": "weir.functions",
    "RuntimeContext": "weir.functions",
    "VectorizedKeyedFunction": "weir.functions",
    "KeyGroupRange": "weir.key_groups",
    "key_group_of": "weir.key_groups",
    "key_group_range": "weir.key_groups",
    "subtask_of": "weir.key_groups",
    "AggregateFunction": "weir.state",
    "AggregatingState": "weir.state",
    "AggregatingStateDescriptor": "weir.state",
    "BroadcastState": "weir.state",
    "ListState": "weir.state",
    "ListStateDescriptor": "weir.state",
    "MapState": "weir.state",
    "MapStateDescriptor": "weir.state",
    "ReduceFunction": "weir.state",
    "ReducingState": "weir.state",
    "ReducingStateDescriptor": "weir.state",
    "StateTtlConfig": "weir.state",
    "ValueState": "weir.state",
    "ValueStateDescriptor": "weir.state",
    "PICKLE": "weir.types",
    "Types": "weir.types",
}

__all__ = [
    "PICKLE",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BatchContext",
    "BatchState",
    "BroadcastState",
    "CheckpointConfig",
    "CheckpointListener",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "KeyGroupRange",
    "KeyedProcessFunction",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ProcessFunction",
    "RawKeyedStateOutput",
    "RawOperatorStateOutput",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RuntimeContext",
    "StateBackend",
    "StateTtlConfig",
    "TlsFiles",
    "Types",
    "ValueState",
    "ValueStateDescriptor",
    "VectorizedKeyedFunction",
    "WeirError",
    "__version__",
    "key_group_of",
    "key_group_range",
    "subtask_of",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'weir' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
