"""``StreamJob``: a stateful PySpark job run as a sequence of micro-epochs.

Each epoch is one Spark job: the source plans the epoch's records, rows are
keyed and routed so that Spark partition ``s`` holds exactly subtask ``s``,
the user's function runs per subtask in ``mapInArrow`` against the
executor's state host, and the sink stages the output. Once the Spark job
succeeded the epoch is final; the coordinator then may take it as the cut of
a checkpoint whose barrier travels with the next epoch's tasks. Output is
published when the checkpoint covering it completes (exactly-once) or at
epoch end (at-least-once). Any failure restores the whole job from the
latest completed checkpoint, as bounded by the restart strategy.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType, _parse_datatype_string

from weir import _internal
from weir.checkpoint import RestoreTicket, check_restore, read_checkpoint, restore_tickets
from weir.config import CheckpointConfig, StateBackend
from weir.exceptions import InvalidArgumentError, WeirError
from weir.spark import restart
from weir.spark.plan import (
    KEY_GROUP,
    MARKER,
    ROUTE,
    Barrier,
    EpochTask,
    HostAddress,
    OperatorSpec,
)
from weir.spark.routing import key_group_column, routing_column, subtask_column
from weir.spark.worker import run_epoch_task
from weir.types import ValueType, value_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from weir.spark.sinks import Sink
    from weir.spark.sources import Position, Source

DEFAULT_MAX_PARALLELISM = 128
HOST_IDLE_TIMEOUT_S = 120.0


@dataclass
class JobResult:
    """What :meth:`StreamJob.execute` did."""

    epochs: int = 0
    """Epochs that succeeded (data and barrier-only)."""
    checkpoints: list[int] = field(default_factory=list)
    """Checkpoints that completed, in order."""
    restarts: int = 0
    """Times the job was restored after a failure."""
    savepoint: str | None = None
    """The savepoint taken by ``stop_with_savepoint``, if any."""
    completions: list[tuple[int, int, int]] = field(default_factory=list)
    """``(checkpoint id, cut epoch, newest epoch run when it completed)`` per
    completed checkpoint or savepoint: epochs past the cut ran during its upload."""
    stats: dict[str, Any] = field(default_factory=dict)
    """The coordinator's checkpoint statistics at the end."""


@dataclass(frozen=True)
class EpochProgress:
    """What the driver knows after an epoch succeeded."""

    epoch: int
    """The epoch that just became final."""
    epochs: int
    """Successful epochs of this execution so far."""
    position: Any
    """The source position after the epoch."""
    checkpoints: tuple[int, ...]
    """Checkpoints completed so far."""
    restarts: int
    """Restores after failures so far."""


@dataclass
class _Stage:
    source: Source | None = None
    source_uid: str | None = None
    before_key: list[Callable[[DataFrame], DataFrame]] = field(default_factory=list)
    key_columns: tuple[str, ...] = ()
    function: Any = None
    output_schema: StructType | None = None
    process_uid: str | None = None
    after_process: list[Callable[[DataFrame], DataFrame]] = field(default_factory=list)
    sink: Sink | None = None
    sink_uid: str | None = None


class DataStream:
    """A stream of rows: transform it, key it, or send it to a sink."""

    def __init__(self, job: StreamJob) -> None:
        self._job = job

    def transform(self, function: Callable[[DataFrame], DataFrame]) -> DataStream:
        """Applies a DataFrame transformation to every epoch's rows (stateless)."""
        stage = self._job._stage
        (stage.after_process if stage.function is not None else stage.before_key).append(function)
        return self

    def key_by(self, *columns: str) -> KeyedStream:
        """Partitions the stream by the given key columns."""
        if not columns:
            raise InvalidArgumentError("key_by needs at least one column name")
        if self._job._stage.function is not None:
            raise InvalidArgumentError(
                "a job has one keyed process step for now; chain further logic inside it"
            )
        self._job._stage.key_columns = tuple(columns)
        return KeyedStream(self._job)

    def sink_to(self, sink: Sink, uid: str) -> None:
        """Sends the stream to ``sink``; ``uid`` keys the sink's handle in checkpoints."""
        self._job._stage.sink = sink
        self._job._stage.sink_uid = uid


class KeyedStream:
    """A stream partitioned by key: ``process`` runs a keyed function on it."""

    def __init__(self, job: StreamJob) -> None:
        self._job = job

    def process(self, function: Any, output_schema: StructType | str, uid: str) -> DataStream:
        """Runs ``function`` (a ``KeyedProcessFunction`` or ``VectorizedKeyedFunction``).

        Args:
            function: The user function; pickled to the workers every epoch.
            output_schema: The schema of what it yields, as a ``StructType`` or
                a DDL string such as ``"key long, avg long"``.
            uid: The operator's stable id: its state is found by it in
                checkpoints and savepoints.
        """
        schema = (
            output_schema if isinstance(output_schema, StructType) else _parse_datatype_string(output_schema)
        )
        if not isinstance(schema, StructType):
            raise InvalidArgumentError(f"output_schema must describe a struct, got {output_schema!r}")
        stage = self._job._stage
        stage.function, stage.output_schema, stage.process_uid = function, schema, uid
        return DataStream(self._job)


class StreamJob:
    """A stateful streaming job on Spark with Weir state and checkpoints.

    Args:
        spark: The session the job's Spark jobs run in.
        name: The job's name; also its id in checkpoint storage.
        checkpoint_dir: Where checkpoints go (path or ``file://``/``s3://`` URL).
        state_backend: ``"heap"`` or ``"rocksdb"`` (or a :class:`~weir.StateBackend`).
        parallelism: Subtasks of the keyed step (default: Spark's default parallelism).
        max_parallelism: Key groups; fixed for the life of the state.
        restore: ``"latest"`` (the newest completed checkpoint of this job, if
            any), a checkpoint or savepoint path, or ``None``.
        allow_non_restored_state: Accept a savepoint with state of operators
            this job no longer has.
        restart_strategy: See :mod:`weir.spark.restart` (default: 3 restarts).
        savepoint_dir: Default directory of savepoints.
        checkpoint_storage_options: Options of the checkpoint storage the
            state hosts upload to (S3 settings, or ``put_delay_ms`` to slow a
            local store down in tests).
        progress: Print a line per epoch and the statistics at the end.
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
    ) -> None:
        self.spark = spark
        self.name = name
        self.checkpoint_dir = checkpoint_dir
        self.state_backend = StateBackend.of(state_backend)
        self.parallelism = parallelism or spark.sparkContext.defaultParallelism
        if not 1 <= self.parallelism <= max_parallelism:
            raise InvalidArgumentError(
                f"parallelism {self.parallelism} must be between 1 and max_parallelism {max_parallelism}"
            )
        self.max_parallelism = max_parallelism
        self.restore = restore
        self.allow_non_restored_state = allow_non_restored_state
        self.restart_strategy = restart_strategy or restart.fixed_delay(3, 0.5)
        self.savepoint_dir = savepoint_dir
        self.checkpoint_storage_options = dict(checkpoint_storage_options or {})
        self.progress = progress
        self.checkpoint_config: CheckpointConfig | None = None
        self._stage = _Stage()
        self._requests: list[tuple[str, str, Future[str]]] = []
        self._lock = threading.Lock()

    # -- building -----------------------------------------------------------

    def enable_checkpointing(self, interval_ms: int, mode: str = "exactly_once") -> StreamJob:
        """Checkpoints every ``interval_ms``; see :class:`~weir.CheckpointConfig` for the rest."""
        self.checkpoint_config = CheckpointConfig(interval_ms=interval_ms, mode=mode)  # type: ignore[arg-type]
        return self

    def from_source(self, source: Source, uid: str) -> DataStream:
        """Reads ``source``; ``uid`` keys its position in checkpoints."""
        self._stage.source, self._stage.source_uid = source, uid
        return DataStream(self)

    # -- savepoints (thread-safe: call while execute() runs) ----------------

    def trigger_savepoint(self, directory: str | None = None) -> Future[str]:
        """Takes a savepoint of the running job; the future gives its path."""
        return self._request("savepoint", directory)

    def stop_with_savepoint(self, directory: str | None = None) -> Future[str]:
        """Takes a savepoint, then stops the job; the future gives its path."""
        return self._request("stop", directory)

    def _request(self, kind: str, directory: str | None) -> Future[str]:
        target = directory or self.savepoint_dir
        if target is None:
            raise InvalidArgumentError("no savepoint directory: pass one or set StreamJob(savepoint_dir=...)")
        future: Future[str] = Future()
        with self._lock:
            self._requests.append((kind, target, future))
        return future

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
            on_epoch: Called in the driver after every successful epoch (it may
                call :meth:`trigger_savepoint` or :meth:`stop_with_savepoint`).
        """
        self._validate()
        _ship_by_value(self._stage.function)
        run = _Run(self, max_epochs, on_epoch)
        try:
            return run.run()
        finally:
            run.close()

    def _validate(self) -> None:
        stage = self._stage
        if stage.source is None or stage.source_uid is None:
            raise InvalidArgumentError("the job has no source: call job.from_source(...)")
        if stage.function is None or stage.process_uid is None:
            raise InvalidArgumentError("the job has no keyed step: call .key_by(...).process(...)")
        if stage.sink is None or stage.sink_uid is None:
            raise InvalidArgumentError("the job has no sink: call .sink_to(sink, uid=...)")
        if self.spark.sparkContext.getConf().get("spark.speculation", "false").lower() == "true":
            raise InvalidArgumentError(
                "spark.speculation is on: speculative copies of a task would apply its "
                "state changes twice at once; set spark.speculation=false for Weir jobs"
            )


class _Run:
    """One execution of a job: coordinator, host, epochs, recovery."""

    def __init__(
        self,
        job: StreamJob,
        max_epochs: int | None,
        on_epoch: Callable[[EpochProgress], None] | None,
    ) -> None:
        self.job = job
        self.on_epoch = on_epoch
        self.stage = job._stage
        self.max_epochs = max_epochs
        self.result = JobResult()
        config = job.checkpoint_config or CheckpointConfig(interval_ms=3_600_000)
        self.checkpointing = job.checkpoint_config is not None
        self.exactly_once = config.mode == "exactly_once"
        self.token = secrets.token_hex(16)
        self.host_dir = tempfile.mkdtemp(prefix=f"weir-{job.name}-")
        os.chmod(self.host_dir, 0o700)
        self.uid = self.stage.process_uid or ""
        self.job_dir = f"{job.checkpoint_dir.rstrip('/')}/{job.name}"
        self.config = config
        self.coordinator = self.start_coordinator()
        assert self.stage.output_schema is not None
        self.output_schema = self.stage.output_schema
        self.arrow_schema = to_arrow_schema(self.output_schema)
        self.generation = 0
        self.epoch = 0
        self.final_epoch: int | None = None
        self.position: Position = None
        self.pending_barrier: tuple[int, int] | None = None
        self.notify: int | None = None
        self.exhausted = False
        self.awaiting: dict[int, tuple[str, Future[str], str]] = {}
        self.stop_requested: int | None = None
        self.stopped = False
        self.cut_wanted = False
        self.cut_wanted_id: int | None = None
        self.last_data_epoch = 0
        self.published_cut = 0
        self.elapsed = 0.0
        self.origin: str | None = None
        self.restore: tuple[RestoreTicket, ...] | None = None
        self.restored_checkpoint: int | None = None
        self.restore_cut: int | None = None
        self.input_columns: tuple[str, ...] | None = None
        self.key_types: tuple[ValueType, ...] | None = None
        self.records = job.spark.sparkContext.accumulator(0)
        self.records_before = 0

    def start_coordinator(self, min_checkpoint_id: int = 1) -> _internal.Coordinator:
        """A coordinator for this generation; checkpoint ids continue from storage."""
        return _internal.Coordinator(
            self.job.checkpoint_dir,
            self.job.name,
            self.token,
            [(self.uid, self.job.parallelism, self.job.max_parallelism)],
            savepoint_dir=self.job.savepoint_dir,
            min_checkpoint_id=min_checkpoint_id,
            **self.config.coordinator_options(),
        )

    def close(self) -> None:
        self.coordinator.shutdown()
        shutil.rmtree(self.host_dir, ignore_errors=True)

    # -- the loop -------------------------------------------------------------

    def run(self) -> JobResult:
        self.start_from(self.initial_restore())
        while True:
            try:
                if self.step():
                    break
            except WeirError:
                raise
            except Exception as failure:  # noqa: BLE001 - any task failure restarts the job
                self.recover(failure)
        self.result.stats = json.loads(self.coordinator.stats())
        if self.job.progress:
            self.print_summary()
        return self.result

    def initial_restore(self) -> str | None:
        restore = self.job.restore
        if restore == "latest":
            return _internal.latest_checkpoint(self.job.checkpoint_dir, self.job.name)
        return restore

    def start_from(self, path: str | None) -> None:
        """Starts a new generation: state, source and sink as of ``path`` (or empty)."""
        self.generation += 1
        self.origin = path
        self.restore = None
        self.restored_checkpoint = self.restore_cut = None
        self.final_epoch = None
        self.pending_barrier = None
        self.cut_wanted = False
        self.cut_wanted_id = None
        self.exhausted = False
        if path is None:
            self.position = None
            return
        dropped = check_restore(
            path,
            [(self.uid, self.job.parallelism, self.job.max_parallelism)],
            allow_non_restored_state=self.job.allow_non_restored_state,
        )
        metadata = read_checkpoint(path)
        # Ids go on after the restored checkpoint or savepoint, as in Flink.
        self.coordinator.shutdown()
        self.coordinator = self.start_coordinator(metadata.checkpoint_id + 1)
        # The job was validated: its source and sink have uids.
        assert self.stage.source_uid is not None and self.stage.sink_uid is not None
        self.position = metadata.sources.get(self.stage.source_uid)
        assert self.stage.sink is not None
        self.stage.sink.recover(metadata.sinks.get(self.stage.sink_uid))
        cut = metadata.cut_epoch
        self.epoch = max(self.epoch, cut)
        # None: the operator is new to this checkpoint, and its state starts empty.
        self.restore = restore_tickets(
            path, self.uid, parallelism=self.job.parallelism, max_parallelism=self.job.max_parallelism
        )
        if self.restore is not None:
            # The restored state is final at the checkpoint's cut: tasks expect that.
            self.restored_checkpoint, self.restore_cut = metadata.checkpoint_id, cut
            self.final_epoch = cut
        self.log(
            f"restored from {path} (checkpoint {metadata.checkpoint_id}, cut epoch "
            f"{metadata.cut_epoch})" + (f"; dropped state of {dropped}" if dropped else "")
        )

    def recover(self, failure: Exception) -> None:
        self.log(f"epoch {self.epoch} failed: {_first_line(failure)}")
        if not self.job.restart_strategy.on_failure():
            raise WeirError(
                f"job {self.job.name} failed {self.job.restart_strategy.failures} times, more "
                f"than its restart strategy allows; last failure: {_first_line(failure)}"
            ) from failure
        time.sleep(self.job.restart_strategy.delay_s)
        self.result.restarts += 1
        # Checkpoints in flight belong to the failed run (Flink aborts them on
        # failover): a fresh coordinator starts clean, ids continue from storage.
        self.coordinator.shutdown()
        self.coordinator = self.start_coordinator()
        for _, future, _ in self.awaiting.values():
            future.set_exception(WeirError("the job failed and restarted before the savepoint completed"))
        self.awaiting.clear()
        self.stop_requested = None
        latest = _internal.latest_checkpoint(self.job.checkpoint_dir, self.job.name)
        self.start_from(latest if latest is not None else self.origin)

    def step(self) -> bool:
        """Runs one epoch (or waits for the coordinator); True when the job is done."""
        self.handle_requests()
        self.drain_events(0.0)
        if self.stopped:
            return True
        if self.max_epochs is not None and self.result.epochs >= self.max_epochs:
            return True
        planned = None
        if not self.exhausted and self.stop_requested is None:
            assert self.stage.source is not None
            planned = self.stage.source.plan(self.job.spark, self.position, self.job.parallelism)
        if planned is not None and planned.frame is not None:
            self.run_epoch(planned.frame)
            self.position, self.exhausted = planned.position, planned.exhausted
            self.last_data_epoch = self.epoch
            self.epoch_succeeded()
            return False
        if planned is not None:
            self.position, self.exhausted = planned.position, planned.exhausted
        if self.exhausted and self.stop_requested is None and self.output_settled():
            return True
        if self.pending_barrier is not None or self.cut_wanted:
            # A triggered checkpoint needs a final epoch for its cut, or a
            # barrier must reach every subtask: run an epoch without data.
            self.run_epoch(None)
            self.epoch_succeeded()
            return False
        self.drain_events(0.2)
        return False

    def output_settled(self) -> bool:
        """With exactly-once output, a bounded job ends once its last epoch is published."""
        assert self.stage.sink is not None
        if not self.exactly_once:
            return True
        if not self.checkpointing:
            # Nothing will ever cover the output with a checkpoint: publish at the end.
            self.stage.sink.publish_up_to(self.epoch)
            return True
        return self.published_cut >= self.last_data_epoch

    def run_epoch(self, frame: DataFrame | None) -> None:
        self.epoch += 1
        if frame is not None:
            for transform in self.stage.before_key:
                frame = transform(frame)
            if self.input_columns is None:
                self.learn_input(frame)
        barrier = None
        if self.pending_barrier is not None:
            checkpoint_id, cut = self.pending_barrier
            barrier = Barrier(
                checkpoint_id,
                cut,
                self.job_dir,
                self.job.checkpoint_storage_options,
                self.coordinator.address,
            )
        task = EpochTask(
            operator=self.operator_spec(),
            epoch=self.epoch,
            final_epoch=self.final_epoch,
            barrier=barrier,
            notify_complete=self.notify,
            pending_checkpoint=self.cut_wanted_id,
        )
        started = time.monotonic()
        output = self.epoch_frame(frame, task)
        assert self.stage.sink is not None
        self.stage.sink.write_epoch(output, self.epoch)
        self.pending_barrier = None
        self.elapsed = time.monotonic() - started

    def learn_input(self, frame: DataFrame) -> None:
        """The input's columns and the key columns' state types, from the first data epoch."""
        missing = [c for c in self.stage.key_columns if c not in frame.columns]
        if missing:
            raise InvalidArgumentError(
                f"key_by names columns {missing} the input does not have; it has {frame.columns}"
            )
        self.input_columns = tuple(frame.columns)
        keys = to_arrow_schema(frame.select(*self.stage.key_columns).schema)
        self.key_types = tuple(value_type(f.type) for f in keys)

    def operator_spec(self) -> OperatorSpec:
        return OperatorSpec(
            uid=self.uid,
            function=self.stage.function,
            key_columns=self.stage.key_columns,
            key_types=self.key_types,
            value_columns=self.input_columns or (),
            output_schema=self.arrow_schema,
            parallelism=self.job.parallelism,
            max_parallelism=self.job.max_parallelism,
            backend=self.job.state_backend.name,
            # A host per generation: state of a failed run never mixes with a restored one.
            host=HostAddress(
                os.path.join(self.host_dir, f"gen-{self.generation}"),
                self.token,
                HOST_IDLE_TIMEOUT_S,
            ),
            restore=self.restore,
            restored_checkpoint=self.restored_checkpoint,
            restore_cut=self.restore_cut,
        )

    def epoch_frame(self, frame: DataFrame | None, task: EpochTask) -> DataFrame:
        """The epoch's rows, keyed and routed, with one marker row per subtask."""
        spark, parallelism, max_parallelism = (
            self.job.spark,
            self.job.parallelism,
            self.job.max_parallelism,
        )
        markers = spark.range(parallelism, numPartitions=1).select(
            F.lit(None).cast("int").alias(KEY_GROUP),
            routing_column(F.col("id").cast("int"), parallelism).alias(ROUTE),
            F.lit(True).alias(MARKER),
        )
        if frame is not None:
            key_group = key_group_column(list(self.stage.key_columns), max_parallelism)
            keyed = (
                frame.withColumn(KEY_GROUP, key_group.cast("int"))
                .withColumn(
                    ROUTE,
                    routing_column(
                        subtask_column(F.col(KEY_GROUP), parallelism, max_parallelism),
                        parallelism,
                    ),
                )
                .withColumn(MARKER, F.lit(False))
            )
            rows = keyed.unionByName(markers, allowMissingColumns=True)
        else:
            rows = markers
        routed = rows.repartition(parallelism, F.col(ROUTE))
        records = self.records
        output = routed.mapInArrow(lambda batches: run_epoch_task(task, batches, records), self.output_schema)
        for transform in self.stage.after_process:
            output = transform(output)
        return output

    def epoch_succeeded(self) -> None:
        self.result.epochs += 1
        self.final_epoch = self.epoch
        assert self.stage.sink is not None
        if not self.exactly_once:
            self.stage.sink.publish_up_to(self.epoch)
        sources = {self.stage.source_uid: self.position}
        sinks = {self.stage.sink_uid: self.stage.sink.handle()}
        self.coordinator.epoch_final(self.epoch, json.dumps(sources), json.dumps(sinks))
        self.drain_events(0.0)
        if self.job.progress:
            records = self.epoch_records()
            self.log(
                f"epoch {self.epoch}: {records:,} records in {self.elapsed:.2f}s{self.checkpoint_summary()}"
            )
        if self.on_epoch is not None:
            self.on_epoch(
                EpochProgress(
                    self.epoch,
                    self.result.epochs,
                    self.position,
                    tuple(self.result.checkpoints),
                    self.result.restarts,
                )
            )

    # -- coordinator events --------------------------------------------------

    def drain_events(self, timeout_s: float) -> None:
        for event in self.coordinator.poll_events(timeout_s):
            self.on_event(event)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "triggered":
            self.cut_wanted = True
            self.cut_wanted_id = int(event["id"])
        elif kind == "inject_barrier":
            self.cut_wanted = False
            self.cut_wanted_id = None
            self.pending_barrier = (int(event["id"]), int(event["cut"]))
        elif kind == "complete":
            self.on_complete(int(event["id"]), int(event["cut"]), event["kind"])
        elif kind == "aborted":
            self.log(f"checkpoint {event['id']} aborted: {event['reason']}")
            waiting = self.awaiting.pop(int(event["id"]), None)
            if waiting is not None:
                waiting[1].set_exception(WeirError(f"savepoint {event['id']} failed: {event['reason']}"))
        elif kind == "fail_job":
            raise _CheckpointFailure(event["reason"])
        elif kind == "cleanup_failed":
            self.log(f"cleanup of old checkpoints failed: {event['message']}")

    def on_complete(self, checkpoint_id: int, cut: int, kind: str) -> None:
        assert self.stage.sink is not None
        if self.exactly_once:
            self.stage.sink.publish_up_to(cut)
        self.published_cut = max(self.published_cut, cut)
        self.result.completions.append((checkpoint_id, cut, self.epoch))
        self.notify = checkpoint_id
        if kind == "checkpoint":
            self.result.checkpoints.append(checkpoint_id)
        waiting = self.awaiting.pop(checkpoint_id, None)
        if waiting is not None:
            request, future, directory = waiting
            path = _savepoint_path(directory, self.job.name, checkpoint_id)
            future.set_result(path)
            if request == "stop":
                self.result.savepoint = path
                self.stopped = True
        self.log(f"{kind} {checkpoint_id} complete (cut epoch {cut})")

    def handle_requests(self) -> None:
        with self.job._lock:
            requests, self.job._requests = self.job._requests, []
        for kind, directory, future in requests:
            if directory.rstrip("/") != (self.job.savepoint_dir or "").rstrip("/"):
                future.set_exception(
                    InvalidArgumentError(
                        f"savepoints of this run go to {self.job.savepoint_dir!r}; pass that "
                        f"directory or set StreamJob(savepoint_dir={directory!r})"
                    )
                )
                continue
            checkpoint_id = self.coordinator.trigger_savepoint()
            self.awaiting[checkpoint_id] = (kind, future, directory)
            if kind == "stop":
                self.stop_requested = checkpoint_id

    # -- progress -------------------------------------------------------------

    def checkpoint_summary(self) -> str:
        """The latest completed checkpoint: id, cut, size and its sync/async durations."""
        stats = json.loads(self.coordinator.stats())
        latest = stats.get("latest_completed")
        if not latest:
            return ""
        subtasks = latest.get("subtasks") or []
        sync = max((s["sync_millis"] for s in subtasks), default=0)
        upload = max((s["async_millis"] for s in subtasks), default=0)
        return (
            f"; checkpoint {latest['id']} (cut epoch {latest.get('cut')}): state "
            f"{_size(latest['state_size_bytes'])}, sync {sync} ms, async {upload} ms, "
            f"end to end {latest['end_to_end_millis']} ms"
        )

    def epoch_records(self) -> int:
        """Records the last epoch's tasks processed (retried tasks count again)."""
        total = int(self.records.value)
        processed, self.records_before = total - self.records_before, total
        return processed

    def print_summary(self) -> None:
        stats = self.result.stats
        counts = stats.get("counts", {})
        history = [c for c in stats.get("history", []) if c.get("status") == "completed"]
        durations = sorted(c["end_to_end_millis"] for c in history)
        typical = f", median end to end {durations[len(durations) // 2]} ms" if durations else ""
        self.log(
            f"finished: {self.result.epochs} epochs, {int(self.records.value):,} records, "
            f"{self.result.restarts} restarts; checkpoints: {counts.get('completed', 0)} completed, "
            f"{counts.get('failed', 0)} failed{typical}"
        )

    def log(self, message: str) -> None:
        if self.job.progress:
            print(f"[weir {self.job.name}] {message}", file=sys.stderr, flush=True)


class _CheckpointFailure(Exception):
    """More consecutive checkpoint failures than tolerated: restore the job."""


def _ship_by_value(function: Any) -> None:
    """Pickles the modules of the function (and of functions it wraps) by value.

    Jobs often define their functions in scripts or example modules that are
    importable in the driver only; Weir's own modules are installed
    everywhere, and installed libraries are left to import normally.
    """
    seen: set[int] = set()
    pending = [function]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        module = sys.modules.get(type(obj).__module__)
        if module is None or not _is_user_module(module.__name__, getattr(module, "__file__", None)):
            continue
        if module.__name__ != "__main__":
            cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
        pending.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())


def _is_user_module(name: str, path: str | None) -> bool:
    if name == "__main__":
        return True
    if name.split(".")[0] in {"weir", "builtins", "pyspark", "pyarrow"} or path is None:
        return False
    return "site-packages" not in path and not path.startswith(sys.base_prefix)


def _savepoint_path(directory: str, job: str, checkpoint_id: int) -> str:
    return f"{directory.rstrip('/')}/savepoint-{job}-{checkpoint_id}"


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size:.1f} GiB"


def _first_line(error: BaseException) -> str:
    """The most telling line of an error: the innermost ``SomeError: message`` if any."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit): ", line)]
    if raised:
        return raised[-1]
    return lines[0] if lines else type(error).__name__
