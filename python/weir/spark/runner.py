"""The shell around the pure driver: carries its decisions out on Spark.

:class:`Runner` owns everything with side effects of one execution of a
job: the checkpoint coordinator, the sources' planned input, the sink, the
state hosts' directory and the Spark jobs of the epochs. It asks
:class:`~weir.spark.driver.Driver` what to do, does it, and reports back
what happened; the decisions themselves live in the driver, which is
unit-tested without Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException

import weir.host
from weir import _internal
from weir.checkpoint import RestoreTicket, check_restore, read_checkpoint, restore_tickets
from weir.config import CheckpointConfig
from weir.exceptions import CheckpointError, InvalidArgumentError, WeirError
from weir.spark import _host
from weir.spark import driver as d
from weir.spark.arrow_batches import ByteLimit, arrow_schema, fixed_width
from weir.spark.epoch_plan import EpochPlanner, StepInput, learn_input
from weir.spark.epoch_sizing import EpochSizer, budget_drifted, epoch_target_ms
from weir.spark.progress import Progress
from weir.spark.sinks import PartitionWriter, TaskWrittenSink
from weir.spark.tasks import Barrier, HostAccess, InJobBarriers, OperatorSpec, OperatorTask
from weir.spark.waterfall import EpochWaterfall, PhaseTimes

if TYPE_CHECKING:
    from types import TracebackType

    import pyarrow as pa
    from pyspark.sql import DataFrame

    from weir.coordinator import CoordinatorEvent
    from weir.spark.api import StreamJob
    from weir.spark.graph import JobGraph, StatefulStep
    from weir.spark.sources import EpochInput

NO_CHECKPOINTS = CheckpointConfig(interval_ms=3_600_000)
"""A job without checkpointing still runs a coordinator (it never triggers within a job's life)."""

JOB_POLL_S = 0.02
"""How often the driver looks at the coordinator's events while a Spark job runs."""


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
    waterfalls: list[EpochWaterfall] = field(default_factory=list)
    """Where each successful epoch's time went (driver steps, task phases)."""
    remote_state_bytes: int = 0
    """State bytes the hosts still alive at the end exchanged with tasks on
    other executors (over TCP); 0 when every task ran on its subtask's owner."""


@dataclass(frozen=True)
class PlannedInput:
    """The source's input for the next Spark job: a plan per epoch, none when nothing waits."""

    epochs: tuple[EpochInput, ...]
    position: Any
    """The source position after the last epoch (unchanged when none)."""
    exhausted: bool

    def outcome(self) -> d.InputPlanned:
        """What the driver learns of it."""
        earlier = tuple(e.position for e in self.epochs[:-1])
        return d.InputPlanned(bool(self.epochs), self.position, self.exhausted, earlier)

    @property
    def size(self) -> int:
        """The input admitted, in the budget's unit."""
        return sum(e.size for e in self.epochs)

    def frames(self) -> list[DataFrame]:
        """Each epoch's records."""
        return [e.frame for e in self.epochs if e.frame is not None]

    @property
    def sized_by_budget(self) -> bool:
        return any(e.sized_by_budget for e in self.epochs)


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


class Runner:
    """One execution of a job (see the module docs); a context manager that
    stops the coordinator and removes the hosts' directory on exit."""

    def __init__(
        self,
        job: StreamJob,
        graph: JobGraph,
        max_epochs: int | None,
        on_epoch: Callable[[EpochProgress], None] | None,
    ) -> None:
        self.job = job
        self.graph = graph
        self.on_epoch = on_epoch
        self.config = job.checkpoint_config or NO_CHECKPOINTS
        origin = (
            _internal.latest_checkpoint(job.checkpoint_dir, job.name, job.checkpoint_storage_options)
            if job.restore == "latest"
            else job.restore
        )
        several = _runs_several_epochs(graph)
        self.driver = d.Driver(
            d.DriverOptions(
                exactly_once=self.config.mode == "exactly_once",
                checkpointing=job.checkpoint_config is not None,
                operators=tuple(step.uid for step in graph.steps),
                source_uid=graph.source_uid,
                origin=origin,
                max_epochs=max_epochs,
                restart_strategy=job.restart_strategy,
                deliver_barriers=True,
                epochs_per_job=job.epochs_per_job if several else 1,
                in_job_cuts=several and job.checkpoint_config is not None,
            )
        )
        self.token = secrets.token_hex(16)
        self.host_dir = tempfile.mkdtemp(prefix=f"weir-{job.name}-")
        os.chmod(self.host_dir, 0o700)
        self.hosts: set[str] = set()
        self.local_host: str | None = None
        """The address of the local mode's state host, once the driver started it."""
        self.local_host_start: threading.Thread | None = None
        self.tcp_hosts = not _is_local_mode(job.spark.sparkContext.master or "local")
        self.job_dir = f"{job.checkpoint_dir.rstrip('/')}/{job.name}"
        self.coordinator: _internal.Coordinator | None = None
        self.inputs: dict[str, StepInput] = {}
        self.planned: PlannedInput | None = None
        self.routed: DataFrame | None = None
        """The planned input routed to the first step's subtasks, if built already."""
        self.background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weir-plan")
        """Plans the next Spark job's input while one runs."""
        self.jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weir-job")
        """Runs the Spark jobs, so the driver hears the coordinator while one runs."""
        self.spark_job: _SparkJob | None = None
        """The Spark job in flight, if any."""
        self.prefetch: (
            tuple[tuple[Any, int | None, int], Future[tuple[PlannedInput, DataFrame | None]]] | None
        ) = None
        """The position the prefetched input starts after, the budget and the most epochs it was
        planned with, and its planning and routing."""
        interval = job.checkpoint_config.interval_ms if job.checkpoint_config is not None else None
        self.sizer = EpochSizer(epoch_target_ms(job.epoch_target_ms, interval) / 1000)
        self.tickets: dict[str, tuple[RestoreTicket, ...]] = {}
        self.restore_cut: int | None = None
        self.records = job.spark.sparkContext.accumulator(0)
        self.phases = job.spark.sparkContext.accumulator({}, PhaseTimes())
        self.planner = EpochPlanner(job.spark, graph, self.records, self.phases, self.learn)
        self.waterfall: EpochWaterfall | None = None
        self.plan_seconds = 0.0
        self.progress = Progress(job.name, enabled=job.progress, records=self.records)
        self.result = JobResult()
        self.byte_limit = ByteLimit(job.spark.conf)
        self.output_fixed_width: bool | None = None
        """Whether the epochs' output has fixed-width columns only, once an epoch had some."""
        self.output_arrow: dict[str, pa.Schema] = {}
        """Each step's output as Arrow batches, converted once (it reads the session's time zone
        through the JVM)."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.background.shutdown(cancel_futures=True)
        self.stop_spark_job()
        self.jobs.shutdown()
        if self.local_host_start is not None:
            self.local_host_start.join()
        if self.coordinator is not None:
            self.shutdown_hosts()
            # Interrupting execute() is how a user cancels a job (Flink's cancel):
            # externalized_cleanup="delete_on_cancellation" then deletes its checkpoints.
            cancelled = kind is not None and issubclass(kind, KeyboardInterrupt)
            self.coordinator.shutdown(cancelled=cancelled)
        shutil.rmtree(self.host_dir, ignore_errors=True)
        self.byte_limit.restore()
        # As in Flink, a savepoint the job did not complete before it ended fails.
        self.job._abandon_requests(
            CheckpointError(
                "the job ended before the savepoint completed; ask for one while the job "
                "runs, for example from execute(on_epoch=...)"
            )
        )

    # -- the loop ---------------------------------------------------------------

    def run(self) -> JobResult:
        """Runs the job to its end (see :meth:`StreamJob.execute`)."""
        facts = d.Facts(now=time.monotonic())
        while True:
            decision = self.driver.next_step(facts)
            started = self.carry_out(decision.effects)
            action = decision.action
            if isinstance(action, d.Finish):
                return self.finish(action)
            if isinstance(action, d.Fail):
                raise _failure(action.error)
            outcome, events = self.act(action)
            facts = d.Facts(
                now=time.monotonic(),
                outcome=outcome,
                events=events + self.poll(0.0),
                requests=self.job._take_requests(),
                started=started,
            )

    def act(self, action: d.Action) -> tuple[d.Outcome | None, list[CoordinatorEvent]]:
        """Carries out one action; returns its outcome and the events seen while waiting."""
        if isinstance(action, d.Restore):
            return self.restore(action), []
        if isinstance(action, d.PlanInput):
            return self.plan_input(action.max_epochs), []
        if isinstance(action, d.RunEpoch):
            self.start_job(action.order)
            return None, []
        if isinstance(action, d.AwaitJob):
            return self.await_job(action.timeout_s)
        if isinstance(action, d.DeliverBarrier):
            return self.deliver_barrier(action), []
        if isinstance(action, d.Wait):
            return None, self.poll(action.timeout_s)
        raise AssertionError(f"unexpected action {action!r}")

    def poll(self, timeout_s: float) -> list[CoordinatorEvent]:
        if self.coordinator is None:
            return []
        return list(self.coordinator.poll_events(timeout_s))

    def carry_out(self, effects: tuple[d.Effect, ...]) -> list[d.SavepointStarted]:
        started: list[d.SavepointStarted] = []
        for effect in effects:
            if isinstance(effect, d.Publish):
                with self.timed("publish"):
                    self.graph.sink.publish_up_to(effect.up_to)
            elif isinstance(effect, d.RecordFinal):
                self.record_final(effect)
            elif isinstance(effect, d.CutAtLastFinal):
                assert self.coordinator is not None
                self.coordinator.cut_at_last_final()
            elif isinstance(effect, d.RequestCheckpoint):
                assert self.coordinator is not None
                self.coordinator.request_checkpoint()
            elif isinstance(effect, d.TriggerSavepoint):
                started.extend(self.trigger_savepoint(effect.request))
            elif isinstance(effect, d.ResolveSavepoint):
                error = WeirError(effect.error) if effect.error is not None else None
                self.job._answer(effect.request, effect.path, error)
            elif isinstance(effect, d.CancelUploads):
                self.cancel_uploads(effect.checkpoint_id)
            elif isinstance(effect, d.Log):
                self.progress.log(effect.message, debug=effect.debug)
        return started

    # -- effects -----------------------------------------------------------------

    def timed(self, step: str) -> Any:
        """Adds the time of the ``with`` block to the current epoch's driver step ``step``."""
        return _DriverStep(self.waterfall, step)

    def record_final(self, effect: d.RecordFinal) -> None:
        assert self.coordinator is not None
        with self.timed("record"):
            self.coordinator.epoch_final(
                effect.epoch, json.dumps(effect.positions), self.sink_handle(effect.epoch)
            )
        self.result.epochs = self.driver.epochs_succeeded
        if self.waterfall is not None:
            self.result.waterfalls.append(self.waterfall)
        self.progress.epoch_done(effect.epoch, self.coordinator, self.waterfall)
        if self.on_epoch is not None:
            self.on_epoch(
                EpochProgress(
                    effect.epoch,
                    self.driver.epochs_succeeded,
                    effect.positions[self.graph.source_uid],
                    tuple(self.driver.checkpoints),
                    self.driver.restarts,
                )
            )

    def sink_handle(self, cut: int) -> str:
        """The sink's handle a checkpoint cut after epoch ``cut`` records, as JSON by sink uid."""
        return json.dumps({self.graph.sink_uid: self.graph.sink.handle(up_to=cut)})

    def plan_cuts(self, order: d.EpochOrder) -> None:
        """Tells the coordinator what a checkpoint cut after each of the order's epochs records,
        so it may cut between them while their Spark job runs; the job's staging is ready, so
        each epoch's handle names the epochs up to it."""
        assert self.coordinator is not None and order.positions is not None
        self.coordinator.epochs_planned(
            [
                (epoch, json.dumps(positions), self.sink_handle(epoch))
                for epoch, positions in zip(order.epochs, order.positions, strict=True)
            ]
        )

    def trigger_savepoint(self, request: d.SavepointRequest) -> list[d.SavepointStarted]:
        assert self.coordinator is not None
        try:
            checkpoint_id = self.coordinator.trigger_savepoint(request.directory, stop=request.stop)
        except WeirError as error:
            self.job._answer(request, None, error)
            return []
        return [d.SavepointStarted(request, checkpoint_id)]

    def cancel_uploads(self, checkpoint_id: int) -> None:
        """Tells the hosts a checkpoint will never complete, so they stop its
        uploads and delete what they wrote of it."""
        self.each_host(
            f"cancel checkpoint {checkpoint_id}",
            lambda address: weir.host.abort_checkpoint(address, self.token, checkpoint_id, tls=self.job.tls),
        )

    def start_host_generation(self, generation: int) -> None:
        """Makes the hosts drop the failed generation's state now, not at their next task."""
        self.each_host(
            f"start generation {generation}",
            lambda address: weir.host.start_generation(
                address, self.token, generation, timeout_s=10.0, tls=self.job.tls
            ),
        )

    def shutdown_hosts(self) -> None:
        """Stops the run's hosts: a host lives as long as its job, not its tasks."""
        self.each_host(
            "stop", lambda address: weir.host.shutdown(address, self.token, timeout_s=10.0, tls=self.job.tls)
        )

    def host_statuses(self, entry: str) -> list[Any]:
        """``entry`` of the status of each known host that answers."""
        statuses = self.each_host(
            "report", lambda address: weir.host.status(address, self.token, timeout_s=10.0, tls=self.job.tls)
        )
        return [status[entry] for status in statuses]

    def each_host(self, what: str, request: Callable[[str], Any]) -> list[Any]:
        """Sends ``request`` to every host that owned a subtask in any generation
        of this run; the answers of those that answer. A host that is gone holds
        nothing any more (a task that needs it finds it lost, and the job restores)."""
        assert self.coordinator is not None
        self.hosts.update(self.coordinator.owners().values())
        if self.local_host is not None:
            self.hosts.add(self.local_host)
        answers = []
        for address in sorted(self.hosts):
            try:
                answers.append(request(address))
            except WeirError as error:
                self.progress.log(f"state host {address} did not {what}: {error}", debug=True)
        return answers

    # -- actions -----------------------------------------------------------------

    def restore(self, action: d.Restore) -> d.Restored | d.RestoreFailed:
        """Starts a generation from ``action.path`` (or empty); see :class:`driver.Restore`."""
        time.sleep(action.delay_s)
        if action.first:
            self.coordinator = self.start_coordinator(action.path)
            if not self.tcp_hosts and self.graph.steps:
                self.start_local_host()
        else:
            assert self.coordinator is not None
            self.coordinator.restart(action.path)
            self.planned, self.routed, self.prefetch = None, None, None
            self.start_host_generation(self.coordinator.generation)
        sink = self.graph.sink
        self.tickets, self.restore_cut = {}, None
        if action.path is None:
            sink.recover(None)
            return d.Restored(d.RestorePoint.empty(sink.high_water()))
        try:
            options = self.job.checkpoint_storage_options
            dropped = check_restore(
                action.path,
                self.graph.shapes(),
                allow_non_restored_state=self.job.allow_non_restored_state,
                storage_options=options,
            )
            checkpoint = read_checkpoint(action.path, storage_options=options)
        except WeirError as error:
            return d.RestoreFailed(error)
        sink.recover(checkpoint.sinks.get(self.graph.sink_uid))
        self.restore_cut = checkpoint.cut_epoch
        for step in self.graph.steps:
            tickets = restore_tickets(
                action.path,
                step.uid,
                parallelism=step.parallelism,
                max_parallelism=step.max_parallelism,
                storage_options=options,
            )
            if tickets is not None:
                self.tickets[step.uid] = tickets
        return d.Restored(
            d.RestorePoint(
                path=action.path,
                checkpoint_id=checkpoint.checkpoint_id,
                cut=checkpoint.cut_epoch,
                positions=checkpoint.sources,
                restored_operators=frozenset(self.tickets),
                sink_high_water=sink.high_water(),
                dropped=tuple(dropped),
            )
        )

    def start_coordinator(self, restored: str | None) -> _internal.Coordinator:
        return _internal.Coordinator(
            self.job.checkpoint_dir,
            self.job.name,
            self.token,
            self.graph.shapes(),
            self.config,
            savepoint_dir=self.job.savepoint_dir,
            storage_options=self.job.checkpoint_storage_options,
            restored=restored,
            tls=self.job.tls,
            **_coordinator_addresses(self.job),
        )

    def plan_input(self, max_epochs: int) -> d.InputPlanned:
        generation_position = self.driver.generation.position if self.driver.generation else None
        started = time.perf_counter()
        budget = self.sizer.budget()
        planned, routed = self.prefetched(generation_position, budget, max_epochs) or (
            self.plan_after(generation_position, budget, max_epochs),
            None,
        )
        self.plan_seconds = time.perf_counter() - started
        self.planned = planned if planned.epochs else None
        self.routed = routed if self.planned is not None else None
        return planned.outcome()

    def plan_after(self, position: Any, budget: int | None, max_epochs: int) -> PlannedInput:
        """Up to ``max_epochs`` epochs of the input waiting after ``position``, ``budget`` each."""
        steps = self.graph.steps
        parallelism = steps[0].parallelism if steps else self.job.parallelism
        epochs: list[EpochInput] = []
        exhausted = False
        while len(epochs) < max_epochs and not exhausted:
            planned = self.graph.source.plan(self.job.spark, position, parallelism, budget)
            exhausted = planned.exhausted
            if planned.frame is None:
                break
            epochs.append(planned)
            position = planned.position
        return PlannedInput(tuple(epochs), position, exhausted)

    def prefetch_next_input(self, max_epochs: int) -> None:
        """Plans up to ``max_epochs`` epochs of the input after the running job's in the
        background (what the driver says the next job may run), and routes it to the first
        step's subtasks: listing and resolving files and Spark's analysis of the routed plan
        are driver work (50-70 ms an epoch) the next job need not wait for. A source plans the
        same records from the same position, so planning early changes nothing but when new
        files are seen."""
        planned = self.planned
        if planned is None or planned.exhausted or max_epochs < 1:
            return
        budget = self.sizer.budget()
        future = self.background.submit(self.plan_and_route, planned.position, budget, max_epochs)
        self.prefetch = ((planned.position, budget, max_epochs), future)

    def plan_and_route(
        self, position: Any, budget: int | None, max_epochs: int
    ) -> tuple[PlannedInput, DataFrame | None]:
        planned = self.plan_after(position, budget, max_epochs)
        routed = self.planner.routed(planned.frames()) if planned.epochs else None
        return planned, routed

    def prefetched(
        self, position: Any, budget: int | None, max_epochs: int
    ) -> tuple[PlannedInput, DataFrame | None] | None:
        """The prefetched input after ``position`` and its routing, if one was planned (else
        ``None``: plan it now, which also reports whatever error planning it early met).

        The prefetch was planned before the running job's time was known: an input the
        budget sized is planned again when the budget has since more than doubled or halved
        (the first epochs of a job whose epochs are sized by time)."""
        prefetch, self.prefetch = self.prefetch, None
        if prefetch is None:
            return None
        (after, planned_budget, planned_epochs), future = prefetch
        if after != position or planned_epochs != max_epochs:
            return None
        try:
            planned = future.result()
        except Exception:  # noqa: BLE001 - planned again on the spot, which raises it
            return None
        if planned[0].sized_by_budget and budget_drifted(planned_budget, budget):
            return None
        return planned

    def start_job(self, order: d.EpochOrder) -> None:
        """Builds the Spark job of the order's epochs and starts it on the job thread."""
        inputs = routed = None
        if order.data:
            assert self.planned is not None and len(self.planned.epochs) == len(order.epochs)
            inputs, routed = self.planned.frames(), self.routed
        self.waterfall = EpochWaterfall(order.epoch, {"plan": self.plan_seconds if order.data else 0.0})
        self.phases.value = {}
        started = time.monotonic()
        # Building the plan runs Spark's analysis: an error there is the job's
        # definition (a missing column, a bad schema), not a failure to retry.
        with self.timed("build"):
            write = self.task_writer(order)
            if order.positions is not None:
                self.plan_cuts(order)
            output = self.planner.frame(inputs, lambda step: self.task(order, step), routed, write)
        if order.data:
            self.prefetch_next_input(self.driver.epochs_after_running())
        spark_writes = order.data and write is None
        self.byte_limit.apply(self.arrow_inputs_fixed_width(output, spark_writes))
        future = self.jobs.submit(self.run_spark_job, order, output, spark_writes)
        self.spark_job = _SparkJob(order, started, future)

    def run_spark_job(self, order: d.EpochOrder, output: DataFrame | None, spark_writes: bool) -> None:
        """The Spark action of a job (on the job thread)."""
        with self.timed("spark_job"):
            if spark_writes:
                assert output is not None
                self.graph.sink.write_epoch(output, order.epoch)
            elif output is not None:
                # The tasks wrote the output, or there is none (no input); every task
                # must run.
                output.write.format("noop").mode("overwrite").save()

    def await_job(self, timeout_s: float) -> tuple[d.Outcome | None, list[CoordinatorEvent]]:
        """Waits up to ``timeout_s`` for the running Spark job's outcome, or less if the
        coordinator reports events first."""
        job = self.spark_job
        assert job is not None, "a Spark job to await"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                job.future.result(timeout=min(JOB_POLL_S, max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                events = self.poll(0.0)
                if events or time.monotonic() >= deadline:
                    return None, events
                continue
            except AnalysisException:
                # The job's definition (a missing column, a bad schema), not a failure to retry.
                self.spark_job = None
                raise
            except Exception as error:  # noqa: BLE001 - any task failure restores the job
                self.spark_job = None
                self.progress.epoch_failed()
                return d.EpochFailed(job.order.epoch, error), []
            self.spark_job = None
            return self.job_succeeded(job), []

    def job_succeeded(self, job: _SparkJob) -> d.EpochSucceeded:
        order = job.order
        assert self.waterfall is not None
        self.waterfall.tasks = dict(self.phases.value)
        self.check_every_subtask_ran(self.waterfall.tasks)
        elapsed = time.monotonic() - job.started
        if order.data and self.planned is not None:
            # Each epoch's share: the budget is per epoch, and epochs share the job's fixed cost.
            epochs = len(order.epochs)
            self.sizer.observe(self.planned.size // epochs, elapsed / epochs)
        self.progress.epoch_ran(elapsed)
        return d.EpochSucceeded(order.epoch)

    def stop_spark_job(self) -> None:
        """Cancels the Spark job in flight, if any, and waits until it ended (the run ends
        with it: an interrupt, or an error the driver cannot recover from)."""
        job, self.spark_job = self.spark_job, None
        if job is None:
            return
        self.job.spark.sparkContext.cancelAllJobs()
        # Cancelled: how it ended does not matter now.
        with contextlib.suppress(Exception):
            job.future.result()

    def arrow_inputs_fixed_width(self, output: DataFrame | None, spark_writes: bool) -> bool:
        """Whether every ``mapInArrow`` input of the epoch's Spark job has fixed-width columns
        only: each step's input and, where Spark hands the output to the sink, the output."""
        learned = [self.inputs.get(step.uid) for step in self.graph.steps]
        if not all(step_input is not None and step_input.fixed_width for step_input in learned):
            return False
        if spark_writes and output is not None:
            if self.output_fixed_width is None:
                self.output_fixed_width = fixed_width(output.schema)
            return self.output_fixed_width
        return True

    def task_writer(self, order: d.EpochOrder) -> PartitionWriter | None:
        """The sink's writer for the last step's tasks, where the sink takes one and the
        step's output goes to it as it is (no transforms after it)."""
        sink, steps = self.graph.sink, self.graph.steps
        if (
            not order.data
            or not steps
            or self.graph.transforms_after
            or not isinstance(sink, TaskWrittenSink)
        ):
            return None
        return sink.task_writer(order.epochs, self.arrow_output(steps[-1]))

    def check_every_subtask_ran(self, phases: dict[str, list[float]]) -> None:
        """Barriers, final epochs and notifications reach a subtask through its task in every
        epoch, empty partitions included: Spark runs ``mapInArrow`` on those too, and a Spark
        that did not would leave subtasks behind (a retried task may count twice, never less)."""
        expected = sum(step.parallelism for step in self.graph.steps)
        ran = int(phases.get("attach", [0.0, 0.0, 0])[2])
        if ran < expected:
            raise WeirError(
                f"an epoch's Spark job ran {ran} Weir tasks for {expected} subtasks: this Spark "
                "skipped mapInArrow on empty partitions, and Weir needs a task per subtask in "
                "every epoch (PySpark 4.3 runs them); run the job on a PySpark that does"
            )

    def deliver_barrier(self, action: d.DeliverBarrier) -> d.BarrierDelivered:
        """Hands a barrier to every subtask's owner host from the driver: no Spark job, and the
        checkpoint's uploads start before the next epoch is even planned (or while the running
        job still reads its input, for a cut its tasks have yet to pass)."""
        order = d.EpochOrder(
            epochs=(self.driver.epoch,),
            generation=action.generation,
            data=False,
            barrier=action.barrier,
            notify_complete=None,
            pending_checkpoint=None,
            operators=action.operators,
            incremental_base=action.incremental_base,
        )
        try:
            with self.timed("barrier"):
                for step in self.graph.steps:
                    # Nothing is restored here: a host without the state refuses the barrier.
                    task = dataclasses.replace(self.task(order, step), restore_tickets=None)
                    for subtask in range(step.parallelism):
                        _host.deliver_barrier(task, subtask)
        except Exception as error:  # noqa: BLE001 - the next epoch's tasks carry the barrier then
            return d.BarrierDelivered(action.barrier.id, error)
        return d.BarrierDelivered(action.barrier.id)

    def learn(self, step: StatefulStep, frame: DataFrame) -> StepInput:
        learned = self.inputs.get(step.uid)
        if learned is None:
            learned = self.inputs[step.uid] = learn_input(step, frame)
        return learned

    def task(self, order: d.EpochOrder, step: StatefulStep) -> OperatorTask:
        assert self.coordinator is not None
        owners = self.coordinator.owners()
        self.hosts.update(owners.values())
        barrier = None
        if order.barrier is not None:
            barrier = Barrier(
                order.barrier.id,
                order.barrier.cut,
                order.barrier.storage,
                self.job.checkpoint_storage_options,
                self.coordinator.address,
                incremental=self.job.state_backend.incremental and order.barrier.kind == "checkpoint",
                base=order.incremental_base,
                compression=self.config.snapshot_compression,
            )
        (operator,) = [o for o in order.operators if o.uid == step.uid]
        at_cut = operator.restore_cut is not None and operator.final_epoch == operator.restore_cut
        in_job = None
        if order.positions is not None:
            in_job = InJobBarriers(
                self.job.checkpoint_storage_options,
                incremental=self.job.state_backend.incremental,
                compression=self.config.snapshot_compression,
            )
        return OperatorTask(
            operator=self.spec(step),
            epochs=order.epochs,
            generation=order.generation,
            final_epoch=operator.final_epoch,
            barrier=barrier,
            notify_complete=order.notify_complete,
            pending_checkpoint=order.pending_checkpoint,
            restored_checkpoint=operator.restored_checkpoint,
            restore_tickets=self.tickets.get(step.uid) if at_cut else None,
            hosts=self.host_access(),
            owners={subtask: address for (uid, subtask), address in owners.items() if uid == step.uid},
            in_job_barriers=in_job,
        )

    def host_access(self) -> HostAccess:
        assert self.coordinator is not None
        return HostAccess(
            directory=self.host_dir,
            token=self.token,
            generation=self.coordinator.generation,
            registry_url=self.coordinator.address,
            tcp=self.tcp_hosts,
            tls=self.job.tls,
        )

    def start_local_host(self) -> None:
        """In Spark's local mode the driver's JVM is the one executor: its state host starts
        now, beside the first epoch's planning, instead of inside that epoch's first task
        (which would otherwise start it and make the other tasks wait)."""
        jvm = self.job.spark.sparkContext._jvm
        assert jvm is not None, "a live SparkContext has a JVM"
        executor_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        hosts = self.host_access()

        def start() -> None:
            try:
                self.local_host = _host.start_executor_host(hosts, executor_pid)
            except (WeirError, OSError) as error:
                # The first task starts it then, and reports what stops it.
                self.progress.log(f"the state host did not start ahead of the tasks: {error}", debug=True)

        self.local_host_start = threading.Thread(target=start, name="weir-host-start", daemon=True)
        self.local_host_start.start()

    def arrow_output(self, step: StatefulStep) -> pa.Schema:
        """The Arrow schema of the batches ``step``'s tasks make."""
        schema = self.output_arrow.get(step.uid)
        if schema is None:
            schema = self.output_arrow[step.uid] = arrow_schema(step.output_schema, self.job.spark)
        return schema

    def spec(self, step: StatefulStep) -> OperatorSpec:
        learned = self.inputs.get(step.uid)
        return OperatorSpec(
            uid=step.uid,
            function=step.function,
            key_columns=step.key_columns,
            key_types=learned.key_types if learned is not None else None,
            value_columns=learned.columns if learned is not None else (),
            key_groups_shipped=learned is not None and learned.key_groups_shipped,
            output_schema=self.arrow_output(step),
            parallelism=step.parallelism,
            max_parallelism=step.max_parallelism,
            backend=self.job.state_backend.name,
        )

    def finish(self, action: d.Finish) -> JobResult:
        driver = self.driver
        result = self.result
        result.epochs = driver.epochs_succeeded
        result.checkpoints = list(driver.checkpoints)
        result.restarts = driver.restarts
        result.savepoint = action.savepoint
        result.completions = list(driver.completed)
        if self.coordinator is not None:
            result.stats = json.loads(self.coordinator.stats())
            result.remote_state_bytes = sum(self.host_statuses("tcp_payload_bytes"))
        self.progress.summary(result)
        return result


@dataclass(frozen=True)
class _SparkJob:
    """A Spark job in flight: its order, when it started, and its action's future."""

    order: d.EpochOrder
    started: float
    future: Future[None]


class _DriverStep:
    """Times a driver step of the current epoch's waterfall (nothing without one)."""

    def __init__(self, waterfall: EpochWaterfall | None, step: str) -> None:
        self.waterfall, self.step = waterfall, step

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *_: object) -> None:
        if self.waterfall is not None:
            driver = self.waterfall.driver
            driver[self.step] = driver.get(self.step, 0.0) + time.perf_counter() - self.started


def _coordinator_addresses(job: StreamJob) -> dict[str, str]:
    """Where the coordinator listens and what executors are told: the addresses
    Spark's own driver uses. It binds to ``spark.driver.bindAddress`` (else
    ``spark.driver.host``); only a wildcard bind advertises ``spark.driver.host``
    (a specific bind address is what executors can reach)."""
    # The session's conf reads through to the context's; getConf() would copy all of it.
    conf = job.spark.conf
    host = conf.get("spark.driver.host", None)
    bind = conf.get("spark.driver.bindAddress", None) or host or "127.0.0.1"
    if bind in ("0.0.0.0", "::") and host:
        return {"bind": bind, "advertise": host}
    return {"bind": bind}


def _runs_several_epochs(graph: JobGraph) -> bool:
    """Whether one Spark job may run several epochs of ``graph``: every stateful step sees the
    epoch of each row (only the first step's transforms come before the tag), and the last
    step's tasks stage the output themselves, so all of an epoch is staged once they are done
    with it (which also lets checkpoints cut between the epochs of a running job)."""
    steps = graph.steps
    return (
        bool(steps)
        and isinstance(graph.sink, TaskWrittenSink)
        and not graph.transforms_after
        and not any(step.transforms_before for step in steps[1:])
    )


def _is_local_mode(master: str) -> bool:
    """Spark's embedded mode: one executor in the driver's JVM, so one host and no TCP."""
    return master == "local" or master.startswith("local[")


def _failure(error: BaseException) -> BaseException:
    """The exception a failed job raises: the SDK's own errors as they are."""
    if isinstance(error, WeirError | InvalidArgumentError):
        return error
    failure = WeirError(str(error))
    failure.__cause__ = error
    return failure
