"""``StreamJob``: build a stateful stream job on Spark, then run it.

Example::

    job = StreamJob(spark, name="events", checkpoint_dir="file:///tmp/ckpt", parallelism=2)
    job.enable_checkpointing(1000)
    (job.from_source(sources.parquet_files("data/events"), uid="events")
        .key_by("event_id").process(Dedup(), "event_id long, user long, amount long", uid="dedup")
        .key_by("user").process(PerUser(), "user long, total long", uid="per-user")
        .sink_to(sinks.parquet_files("out/"), uid="out"))
    result = job.execute()

Each ``process`` is a stateful operator with its own uid, parallelism and
max parallelism (the job's by default); ``transform`` adds stateless
DataFrame steps anywhere in the chain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyspark
from pyspark.sql.types import StructType, _parse_datatype_string

from weir.config import CheckpointConfig, CheckpointingMode, StateBackend, TlsFiles
from weir.exceptions import InvalidArgumentError
from weir.spark import epoch_sizing, restart
from weir.spark.driver import SavepointRequest
from weir.spark.graph import JobGraph, StatefulStep, Transform, check_parallelism, check_uids
from weir.spark.routing import check_pyspark
from weir.spark.shipping import ship_by_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from weir.spark.runner import EpochProgress, JobResult
    from weir.spark.sinks import Sink
    from weir.spark.sources import Source

DEFAULT_MAX_PARALLELISM = 128
DEFAULT_EPOCHS_PER_JOB = 4


@dataclass
class _Chain:
    """What the builder has collected so far; streams are positions in it."""

    source: Source | None = None
    source_uid: str | None = None
    steps: list[StatefulStep] = field(default_factory=list)
    transforms: list[Transform] = field(default_factory=list)
    sink: Sink | None = None
    sink_uid: str | None = None
    length: int = 0
    """Calls that extended the chain; a stream may only be extended at the tip."""


class DataStream:
    """A stream of rows: transform it, key it, process it, or send it to a sink."""

    def __init__(self, job: StreamJob) -> None:
        self._job = job
        self._position = job._chain.length

    def _extend(self) -> _Chain:
        chain = self._job._chain
        if self._position != chain.length:
            raise InvalidArgumentError(
                "a Weir job is a single chain: extend the stream returned by the previous call"
            )
        if chain.sink is not None:
            raise InvalidArgumentError("the job already has a sink; a job has one sink at its end")
        chain.length += 1
        return chain

    def transform(self, function: Transform) -> DataStream:
        """Applies a stateless DataFrame transformation to every epoch's rows."""
        self._extend().transforms.append(function)
        return DataStream(self._job)

    def key_by(self, *columns: str) -> KeyedStream:
        """Partitions the stream by the given key columns for the next ``process``.

        A key column holds booleans, ints, longs, floats, doubles, strings or binaries
        (several columns make a composite key): state cannot be keyed by a byte, a short,
        a timestamp, a date, a decimal, a struct or an array, and such a column is refused
        before the first epoch with rows runs; convert it first (e.g. ``F.unix_micros``)."""
        if not columns:
            raise InvalidArgumentError("key_by needs at least one column name")
        self._extend()
        return KeyedStream(self._job, tuple(columns))

    def process(
        self,
        function: Any,
        output_schema: StructType | str,
        uid: str,
        *,
        parallelism: int | None = None,
    ) -> DataStream:
        """Runs a non-keyed stateful ``function`` (a :class:`~weir.ProcessFunction`,
        usually also a :class:`~weir.CheckpointedFunction` with operator state).

        Rows reach its subtasks spread by a hash of all their columns; operator
        state is redistributed as its kind says when the parallelism changes.
        """
        self._extend()
        self._job._add_step(function, output_schema, uid, None, parallelism, None)
        return DataStream(self._job)

    def sink_to(self, sink: Sink, uid: str) -> None:
        """Sends the stream to ``sink``; ``uid`` keys the sink's handle in checkpoints."""
        chain = self._extend()
        chain.sink, chain.sink_uid = sink, uid


class KeyedStream:
    """A stream partitioned by key: ``process`` runs a keyed function on it."""

    def __init__(self, job: StreamJob, key_columns: tuple[str, ...]) -> None:
        self._job = job
        self._key_columns = key_columns
        self._position = job._chain.length

    def process(
        self,
        function: Any,
        output_schema: StructType | str,
        uid: str,
        *,
        parallelism: int | None = None,
        max_parallelism: int | None = None,
    ) -> DataStream:
        """Runs a keyed ``function`` (a :class:`~weir.KeyedProcessFunction` or
        :class:`~weir.VectorizedKeyedFunction`) per key.

        Args:
            function: The user function; pickled to the workers every epoch.
            output_schema: The schema of what it yields, as a ``StructType`` or a
                DDL string such as ``"key long, avg long"``.
            uid: The operator's stable id: its state is found by it in
                checkpoints and savepoints.
            parallelism: Its subtasks (default: the job's parallelism).
            max_parallelism: Its key groups, fixed for the life of its state
                (default: the job's).
        """
        if self._position != self._job._chain.length:
            raise InvalidArgumentError(
                "a Weir job is a single chain: call process on the stream key_by returned last"
            )
        self._job._chain.length += 1
        self._job._add_step(function, output_schema, uid, self._key_columns, parallelism, max_parallelism)
        return DataStream(self._job)


class StreamJob:
    """A stateful streaming job on Spark with Weir state and checkpoints.

    Args:
        spark: The session the job's Spark jobs run in.
        name: The job's name; also its id in checkpoint storage.
        checkpoint_dir: Where checkpoints go (path or ``file://``/``s3://`` URL).
        state_backend: ``"heap"`` or ``"rocksdb"`` (or a :class:`~weir.StateBackend`).
        parallelism: Default subtasks of each stateful step (default: Spark's
            default parallelism).
        max_parallelism: Default key groups of each keyed step; fixed for the
            life of its state.
        restore: ``"latest"`` (the newest checkpoint of this job's current
            timeline, if any), a checkpoint or savepoint path, or ``None``.
        allow_non_restored_state: Accept a savepoint with state of operators
            this job no longer has.
        restart_strategy: See :mod:`weir.spark.restart` (default: 3 restarts).
        savepoint_dir: Default directory of savepoints.
        checkpoint_storage_options: Options of the checkpoint storage (S3
            settings, or ``put_delay_ms`` to slow a local store down in tests).
        progress: Print a line per epoch and the statistics at the end.
        tls: The job's TLS files (:class:`~weir.config.TlsFiles`), at the same
            paths on the driver and every executor: the coordinator serves
            HTTPS and state hosts serve TCP over TLS (see docs/deploy.md).
        epoch_target_ms: How long an epoch aims to run when the source sizes
            epochs by time (a file source without ``max_files_per_epoch``;
            see :mod:`weir.spark.epoch_sizing`). Default: the checkpoint
            interval, at most one second.
        epochs_per_job: The most epochs one Spark job runs where their input
            waits (a backlog). Each Spark job costs a fixed amount beyond its
            rows (about 0.3 s on two cores), which several epochs share;
            checkpoints still cut between epochs while the job runs. With
            checkpointing on, the first job of a fresh start runs one epoch.
            Applies where the sink stages output from the tasks themselves and no
            ``transform`` follows the first stateful step; other jobs run one
            epoch per Spark job.
    """

    def __init__(
        self,
        spark: SparkSession,
        name: str,
        checkpoint_dir: str,
        *,
        state_backend: StateBackend | str = "heap",
        parallelism: int | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        restore: str | None = None,
        allow_non_restored_state: bool = False,
        restart_strategy: restart.RestartStrategy | None = None,
        savepoint_dir: str | None = None,
        checkpoint_storage_options: dict[str, str] | None = None,
        progress: bool = True,
        tls: TlsFiles | None = None,
        epoch_target_ms: int | None = None,
        epochs_per_job: int = DEFAULT_EPOCHS_PER_JOB,
    ) -> None:
        check_pyspark(pyspark.__version__)
        self.spark = spark
        self.name = name
        self.checkpoint_dir = checkpoint_dir
        self.state_backend = StateBackend.of(state_backend)
        self.parallelism = parallelism or spark.sparkContext.defaultParallelism
        check_parallelism(name, self.parallelism, max_parallelism)
        self.max_parallelism = max_parallelism
        self.restore = restore
        self.allow_non_restored_state = allow_non_restored_state
        self.restart_strategy = restart_strategy or restart.fixed_delay(3, 0.5)
        self.savepoint_dir = savepoint_dir
        self.checkpoint_storage_options = dict(checkpoint_storage_options or {})
        self.progress = progress
        self.tls = tls
        epoch_sizing.epoch_target_ms(epoch_target_ms, None)  # rejects a bad target now
        self.epoch_target_ms = epoch_target_ms
        if epochs_per_job < 1:
            raise InvalidArgumentError(f"epochs_per_job is {epochs_per_job}: give at least 1")
        self.epochs_per_job = epochs_per_job
        self.checkpoint_config: CheckpointConfig | None = None
        self._chain = _Chain()
        self._requests: list[SavepointRequest] = []
        self._futures: dict[SavepointRequest, Future[str]] = {}
        self._lock = threading.Lock()

    # -- building -----------------------------------------------------------

    def enable_checkpointing(self, interval_ms: int, mode: CheckpointingMode = "exactly_once") -> StreamJob:
        """Checkpoints every ``interval_ms``; see :class:`~weir.CheckpointConfig` for the rest."""
        return self.set_checkpoint_config(CheckpointConfig(interval_ms=interval_ms, mode=mode))

    def set_checkpoint_config(self, config: CheckpointConfig) -> StreamJob:
        """Checkpoints as ``config`` says (interval, timeout, min pause, retention, ...)."""
        self.checkpoint_config = config
        return self

    def from_source(self, source: Source, uid: str) -> DataStream:
        """Reads ``source``; ``uid`` keys its position in checkpoints."""
        if self._chain.source is not None:
            raise InvalidArgumentError("the job already has a source; a job reads one source")
        self._chain.source, self._chain.source_uid = source, uid
        return DataStream(self)

    def _add_step(
        self,
        function: Any,
        output_schema: StructType | str,
        uid: str,
        key_columns: tuple[str, ...] | None,
        parallelism: int | None,
        max_parallelism: int | None,
    ) -> None:
        schema = (
            output_schema if isinstance(output_schema, StructType) else _parse_datatype_string(output_schema)
        )
        if not isinstance(schema, StructType):
            raise InvalidArgumentError(f"output_schema must describe a struct, got {output_schema!r}")
        step = StatefulStep(
            uid=uid,
            function=function,
            output_schema=schema,
            key_columns=key_columns,
            parallelism=parallelism or self.parallelism,
            max_parallelism=max_parallelism or self.max_parallelism,
            transforms_before=tuple(self._chain.transforms),
        )
        check_parallelism(uid, step.parallelism, step.max_parallelism)
        self._chain.transforms.clear()
        self._chain.steps.append(step)

    def graph(self) -> JobGraph:
        """The job as built; raises if a part is missing or two parts share a uid."""
        chain = self._chain
        if chain.source is None or chain.source_uid is None:
            raise InvalidArgumentError("the job has no source: call job.from_source(...)")
        if chain.sink is None or chain.sink_uid is None:
            raise InvalidArgumentError("the job has no sink: call .sink_to(sink, uid=...)")
        check_uids([chain.source_uid, *(s.uid for s in chain.steps), chain.sink_uid])
        return JobGraph(
            chain.source,
            chain.source_uid,
            tuple(chain.steps),
            tuple(chain.transforms),
            chain.sink,
            chain.sink_uid,
        )

    # -- savepoints (thread-safe: call while execute() runs) ----------------

    def trigger_savepoint(self, directory: str | None = None) -> Future[str]:
        """Takes a savepoint of the running job; the future gives its path.

        As in Flink, a savepoint taken while the job goes on publishes no sink
        output: failover restores checkpoints, never intermediate savepoints.
        """
        return self._request(directory, stop=False)

    def stop_with_savepoint(self, directory: str | None = None) -> Future[str]:
        """Takes a savepoint, publishes the output it covers, then stops the job;
        the future gives its path."""
        return self._request(directory, stop=True)

    def _request(self, directory: str | None, *, stop: bool) -> Future[str]:
        if directory is None and self.savepoint_dir is None:
            raise InvalidArgumentError("no savepoint directory: pass one or set StreamJob(savepoint_dir=...)")
        request = SavepointRequest(directory or self.savepoint_dir, stop)
        future: Future[str] = Future()
        with self._lock:
            self._requests.append(request)
            self._futures[request] = future
        return future

    def _take_requests(self) -> list[SavepointRequest]:
        with self._lock:
            requests, self._requests = self._requests, []
        return requests

    def _answer(self, request: SavepointRequest, path: str | None, error: BaseException | None) -> None:
        with self._lock:
            future = self._futures.pop(request)
        if error is not None:
            future.set_exception(error)
        else:
            assert path is not None
            future.set_result(path)

    def _abandon_requests(self, error: BaseException) -> None:
        """Fails every savepoint request not answered yet (the run ended)."""
        with self._lock:
            futures, self._futures, self._requests = list(self._futures.values()), {}, []
        for future in futures:
            future.set_exception(error)

    # -- running ------------------------------------------------------------

    def execute(
        self,
        *,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochProgress], None] | None = None,
    ) -> JobResult:
        """Runs the job until a bounded source is exhausted (and its output
        published), ``max_epochs`` epochs ran, or ``stop_with_savepoint``.

        Args:
            max_epochs: Stop after this many successful epochs.
            on_epoch: Called in the driver after every successful Spark job,
                with its last epoch (it may call :meth:`trigger_savepoint` or
                :meth:`stop_with_savepoint`).

        Interrupting it (``KeyboardInterrupt``) cancels the job: its retained
        checkpoints stay, unless the checkpoint config says
        ``externalized_cleanup="delete_on_cancellation"``.
        """
        from weir.spark.runner import Runner

        graph = self.graph()
        if str(self.spark.conf.get("spark.speculation", "false")).lower() == "true":
            raise InvalidArgumentError(
                "spark.speculation is on: speculative copies of a task would apply its "
                "state changes twice at once; set spark.speculation=false for Weir jobs"
            )
        for step in graph.steps:
            ship_by_value(step.function)
        with Runner(self, graph, max_epochs, on_epoch) as runner:
            return runner.run()
