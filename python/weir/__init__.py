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

from weir._internal import __version__
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
