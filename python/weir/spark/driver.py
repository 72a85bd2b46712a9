"""The pure driver of a stream job: what to do next, given what happened.

:class:`Driver` holds the job's control state (epochs, the pending barrier,
savepoint requests, the lineage of checkpoints the run may fail over to,
the restart strategy) and nothing else: no Spark, no storage, no clock.
:meth:`Driver.next_step` takes the :class:`Facts` the shell observed since
the previous step (coordinator events, savepoint requests, the outcome of
the previous action, the time) and returns a :class:`Decision`: side effects
to carry out in order, then one action. :mod:`weir.spark.runner` is the
shell that carries decisions out on Spark, like the Rust checkpoint
coordinator's driver does for its state machine.

The rules it implements:

- An epoch becomes final when its Spark job succeeded; the coordinator may
  take it as the cut of a triggered checkpoint. Its barrier goes from the
  driver straight to every subtask's state host before the next epoch runs
  (``deliver_barriers``); if that fails, or without it, the barrier travels
  with the next epoch's tasks (an epoch without data when no input is
  waiting). A host that already took a barrier ignores it the second time.
- Where input waits, one Spark job may run several epochs
  (``epochs_per_job``), once an epoch is final (with checkpointing on, the
  first job of a fresh start runs one, so the first checkpoint has a cut
  soon). With ``in_job_cuts`` the driver hands the
  coordinator what a checkpoint cut after each of them records, so a
  checkpoint triggered while they run cuts between them (the tasks take its
  barrier at that epoch boundary) instead of waiting for the job to end.
  One triggered before any task of the job began its first epoch (the job
  still reads and shuffles its input) cuts at the newest final epoch: the
  driver hands that barrier to the hosts while the job runs, and every task
  is granted it at its start too (a host takes it once).
- Exactly-once output is published when a checkpoint covering it completes
  and, as in Flink, never on an intermediate savepoint (failover restores
  checkpoints, so a savepoint's output would be published twice); a
  stop-with-savepoint publishes, since the job ends there.
- A bounded job whose input ended asks for the checkpoint that publishes
  its last output at once, instead of waiting up to an interval.
- Any failure restores the whole job from the newest checkpoint of the
  lineage this run started on (never from a checkpoint of an abandoned
  timeline), or starts it empty again when none completed, as the restart
  strategy allows.
- Epoch numbers never repeat within a run, nor reuse a number the sink has
  seen, so output of an abandoned timeline never collides with new output.

Examples:
    >>> from weir.spark.driver import Driver, DriverOptions, Facts, PlanInput, Restore
    >>> driver = Driver(DriverOptions(exactly_once=True, checkpointing=True))
    >>> first = driver.next_step(Facts(now=0.0))
    >>> isinstance(first.action, Restore), first.action.path
    (True, None)
    >>> from weir.spark.driver import Restored
    >>> step = driver.next_step(Facts(now=0.0, outcome=Restored(RestorePoint.empty())))
    >>> isinstance(step.action, PlanInput)
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from weir.coordinator import (
    BarrierInjected,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointSubsumed,
    CheckpointTriggered,
    CleanupFailed,
    CoordinatorEvent,
    JobFailed,
    LeaseLost,
)
from weir.exceptions import WeirError
from weir.spark.restart import RestartStrategy, fixed_delay

__all__ = [
    "AwaitJob",
    "BarrierDelivered",
    "Decision",
    "DeliverBarrier",
    "Driver",
    "DriverOptions",
    "EpochFailed",
    "EpochOrder",
    "EpochSucceeded",
    "Facts",
    "Fail",
    "Finish",
    "InputPlanned",
    "Log",
    "OperatorOrder",
    "Outcome",
    "PlanInput",
    "Publish",
    "RecordFinal",
    "ResolveSavepoint",
    "Restore",
    "RestoreFailed",
    "RestorePoint",
    "Restored",
    "RunEpoch",
    "SavepointRequest",
    "SavepointStarted",
    "CancelUploads",
    "CutAtLastFinal",
    "TriggerSavepoint",
    "Wait",
]

IDLE_POLL_S = 0.2
"""How long the shell waits for coordinator events when there is nothing to run."""


# -- what the shell tells the driver ---------------------------------------------


@dataclass(frozen=True, eq=False)
class SavepointRequest:
    """A user's request for a savepoint; ``stop`` ends the job after it.

    Compared by identity: each request is answered once.
    """

    directory: str | None
    stop: bool


@dataclass(frozen=True)
class RestorePoint:
    """What a restore found: the checkpoint or savepoint a generation starts from."""

    path: str | None
    """The restored checkpoint or savepoint; ``None`` when the generation starts empty."""
    checkpoint_id: int | None
    cut: int | None
    """The epoch the restored state is final at."""
    positions: dict[str, Any]
    """Sources' positions by uid."""
    restored_operators: frozenset[str]
    """Uids of the operators the restored state has (others start empty)."""
    sink_high_water: int
    """The newest epoch the sink has ever staged or published (0 if none)."""
    dropped: tuple[str, ...] = ()
    """Uids of stored operators the job no longer has (``allow_non_restored_state``)."""

    @staticmethod
    def empty(sink_high_water: int = 0) -> RestorePoint:
        """A generation that starts without state."""
        return RestorePoint(None, None, None, {}, frozenset(), sink_high_water)


@dataclass(frozen=True)
class Restored:
    """The shell restored (or emptied) the job as :class:`Restore` asked."""

    point: RestorePoint


@dataclass(frozen=True)
class RestoreFailed:
    """The restore target cannot be used (e.g. its state does not fit the job)."""

    error: BaseException


@dataclass(frozen=True)
class InputPlanned:
    """The source planned the next epochs' input (or found none)."""

    available: bool
    position: Any
    """The source position after that input (unchanged when none)."""
    exhausted: bool
    earlier: tuple[Any, ...] = ()
    """When the input spans several epochs, the position after each epoch before the last
    (whose position is :attr:`position`); empty for one epoch."""

    @property
    def epochs(self) -> int:
        """How many epochs the input spans."""
        return len(self.earlier) + 1


@dataclass(frozen=True)
class EpochSucceeded:
    """The Spark job of the epochs up to ``epoch`` succeeded: every task committed and the
    sink staged their output."""

    epoch: int


@dataclass(frozen=True)
class EpochFailed:
    """The Spark job of the epochs up to ``epoch`` failed (a task, a host, an executor)."""

    epoch: int
    error: BaseException


@dataclass(frozen=True)
class SavepointStarted:
    """The coordinator accepted a requested savepoint under ``checkpoint_id``."""

    request: SavepointRequest
    checkpoint_id: int


@dataclass(frozen=True)
class BarrierDelivered:
    """The outcome of :class:`DeliverBarrier`: ``error`` is ``None`` when every subtask took it."""

    checkpoint_id: int
    error: BaseException | None = None


Outcome: TypeAlias = Restored | RestoreFailed | InputPlanned | EpochSucceeded | EpochFailed | BarrierDelivered
"""The result of the previous step's action."""


@dataclass(frozen=True)
class Facts:
    """Everything observed since the previous step."""

    now: float
    """Monotonic seconds (restart strategies count failures over time)."""
    outcome: Outcome | None = None
    events: Sequence[CoordinatorEvent] = ()
    requests: Sequence[SavepointRequest] = ()
    started: Sequence[SavepointStarted] = ()


# -- what the driver tells the shell ---------------------------------------------


@dataclass(frozen=True)
class Publish:
    """Publish the sink's staged output of every epoch ``<= up_to``."""

    up_to: int


@dataclass(frozen=True)
class RecordFinal:
    """Tell the coordinator that ``epoch`` is final, with the sources' positions after it."""

    epoch: int
    positions: dict[str, Any]


@dataclass(frozen=True)
class RequestCheckpoint:
    """Ask the coordinator for a checkpoint now, ahead of the interval: the
    input ended and the last output waits for a checkpoint to be published."""


@dataclass(frozen=True)
class TriggerSavepoint:
    """Ask the coordinator for a savepoint; answer with :class:`SavepointStarted`."""

    request: SavepointRequest


@dataclass(frozen=True)
class ResolveSavepoint:
    """Answer a savepoint request: its path, or why it failed."""

    request: SavepointRequest
    path: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class CancelUploads:
    """The checkpoint will never complete: state hosts cancel its uploads."""

    checkpoint_id: int


@dataclass(frozen=True)
class Log:
    """A progress message; ``debug`` ones only at debug level."""

    message: str
    debug: bool = False


@dataclass(frozen=True)
class CutAtLastFinal:
    """No epoch runs until the barrier is delivered: a triggered checkpoint may take the newest
    final epoch as its cut (its barrier is among the next events), instead of an epoch without
    data run for the cut."""


Effect: TypeAlias = (
    Publish
    | RecordFinal
    | RequestCheckpoint
    | CutAtLastFinal
    | TriggerSavepoint
    | ResolveSavepoint
    | CancelUploads
    | Log
)


@dataclass(frozen=True)
class Restore:
    """Start generation ``generation`` from ``path`` (``None``: empty), after ``delay_s``.

    The shell restarts the coordinator on that lineage, checks the state fits
    the job, recovers the sink (publishing what ``path`` covers, aborting every
    other staged epoch), drops older generations' state in the hosts, and
    answers :class:`Restored` or :class:`RestoreFailed`.
    """

    path: str | None
    generation: int
    delay_s: float = 0.0
    first: bool = False
    """True for the run's first start (the coordinator starts instead of restarting)."""


@dataclass(frozen=True)
class PlanInput:
    """Ask the source for the input of the next epochs, at most ``max_epochs`` of them (as much
    as waits); answer with :class:`InputPlanned`."""

    max_epochs: int = 1


@dataclass(frozen=True)
class OperatorOrder:
    """What every task of one stateful operator is told in an epoch."""

    uid: str
    final_epoch: int | None
    """The newest final epoch the task folds into the base (and expects the host to hold)."""
    restore_from: str | None
    """The checkpoint or savepoint the generation's state of this operator starts from."""
    restored_checkpoint: int | None
    restore_cut: int | None
    """Only a task starting right at this final epoch may load the state from storage."""


@dataclass(frozen=True)
class EpochOrder:
    """The epochs of one Spark job (see :class:`RunEpoch`)."""

    epochs: tuple[int, ...]
    """Consecutive epoch numbers, run in order by every task."""
    generation: int
    data: bool
    """True when the planned input goes in; False for an epoch without input (it still runs
    a task per subtask)."""
    barrier: BarrierInjected | None
    """A checkpoint's barrier every subtask takes before its records."""
    notify_complete: int | None
    """The newest completed checkpoint functions have not yet been told of."""
    pending_checkpoint: int | None
    """A triggered checkpoint this epoch may become the cut of."""
    operators: tuple[OperatorOrder, ...]
    incremental_base: int | None = None
    """The newest checkpoint this run completed: an incremental checkpoint references the files
    it stored instead of uploading them again (the storage keeps them until a newer one completes)."""
    positions: tuple[dict[str, Any], ...] | None = None
    """With in-job cuts: the sources' positions after each epoch, which the coordinator records
    for a checkpoint it cuts there while the job runs (``None``: cuts only between jobs)."""

    @property
    def epoch(self) -> int:
        """The last epoch: final once the job succeeded."""
        return self.epochs[-1]


@dataclass(frozen=True)
class RunEpoch:
    """Start the order's epochs as one Spark job; its outcome (:class:`EpochSucceeded` or
    :class:`EpochFailed`) comes while the driver awaits it (:class:`AwaitJob`)."""

    order: EpochOrder


@dataclass(frozen=True)
class AwaitJob:
    """A Spark job runs: wait up to ``timeout_s`` for its outcome or coordinator events,
    whichever comes first. Effects of events (publishing a completed checkpoint's output,
    cancelling an aborted one's uploads) are carried out while the job runs."""

    timeout_s: float


@dataclass(frozen=True)
class Wait:
    """Wait up to ``timeout_s`` for coordinator events (0: just look at them)."""

    timeout_s: float


@dataclass(frozen=True)
class Finish:
    """The job is done (input exhausted and published, stopped with a savepoint, or epoch budget)."""

    savepoint: str | None = None


@dataclass(frozen=True)
class Fail:
    """The job fails for good with ``error`` (the restart strategy is exhausted, bad input)."""

    error: BaseException


@dataclass(frozen=True)
class DeliverBarrier:
    """Hand a checkpoint's barrier to every subtask's host now, between epochs (the hosts have
    committed its cut and begin nothing else meanwhile) or while a Spark job's tasks have yet to
    begin its first epoch; answer with :class:`BarrierDelivered`."""

    barrier: BarrierInjected
    generation: int
    operators: tuple[OperatorOrder, ...]
    """What each operator's subtasks expect of their hosts (as a task of the next epoch would)."""
    incremental_base: int | None


Action: TypeAlias = Restore | PlanInput | RunEpoch | AwaitJob | DeliverBarrier | Wait | Finish | Fail


@dataclass(frozen=True)
class Decision:
    """Effects to carry out in order, then one action."""

    effects: tuple[Effect, ...]
    action: Action


# -- the driver ------------------------------------------------------------------


@dataclass(frozen=True)
class DriverOptions:
    """The job's shape as far as decisions go."""

    exactly_once: bool = True
    checkpointing: bool = True
    """False when checkpointing is off: exactly-once output is published at the end."""
    operators: tuple[str, ...] = ()
    """Uids of the stateful operators."""
    source_uid: str = "source"
    origin: str | None = None
    """The checkpoint or savepoint the run starts from, if any."""
    max_epochs: int | None = None
    restart_strategy: RestartStrategy = field(default_factory=lambda: fixed_delay(3, 0.5))
    deliver_barriers: bool = False
    """Deliver barriers to the state hosts between epochs (:class:`DeliverBarrier`) instead of
    with the next epoch's tasks."""
    epochs_per_job: int = 1
    """The most epochs one Spark job runs, where their input waits."""
    in_job_cuts: bool = False
    """Checkpoints may cut between the epochs of a running Spark job (its tasks report every
    epoch boundary to the coordinator): only where the tasks themselves stage the output, so
    everything up to a cut is staged when its last subtask acks."""


@dataclass
class _Generation:
    """Control state of one generation (from a restore to the next failure)."""

    number: int
    point: RestorePoint
    final_epoch: int | None = None
    position: Any = None
    exhausted: bool = False
    pending_input: InputPlanned | None = None
    cut_wanted: int | None = None
    barrier: BarrierInjected | None = None
    """A barrier the next epoch's tasks carry."""
    undelivered: list[BarrierInjected] = field(default_factory=list)
    """Barriers the driver hands to the hosts before the next epoch, oldest first."""
    recorded: bool = False
    """An epoch of this generation became final (the coordinator holds its cut)."""
    cut_asked: int | None = None
    """The triggered checkpoint last offered the newest final epoch as its cut."""
    last_data_epoch: int | None = None


class Driver:
    """Decides a stream job's next step (see the module docs)."""

    def __init__(self, options: DriverOptions) -> None:
        self.options = options
        self.epoch = 0
        """The newest epoch number issued in this run."""
        self.epochs_succeeded = 0
        self.restarts = 0
        self.completed: list[tuple[int, int, int]] = []
        """``(checkpoint id, cut, newest epoch run)`` per completed checkpoint or savepoint."""
        self.checkpoints: list[int] = []
        self.lineage_head: str | None = options.origin
        """Where a failover restores from: the newest checkpoint this run completed, else the origin."""
        self.published_up_to = 0
        self.notify: int | None = None
        self.awaiting: dict[int, SavepointRequest] = {}
        self.stop_savepoint: int | None = None
        self.stop_requested = False
        self.finished_savepoint: str | None = None
        self.generation: _Generation | None = None
        self.restoring: Restore | None = None
        self.started = False
        self.recorded_final = False
        """An epoch became final in this step: the next step must see the coordinator's answer."""
        self.fatal: BaseException | None = None
        """Set when the job must fail without a restart (bad restore target, lease lost)."""
        self.running: EpochOrder | None = None
        """The order of the Spark job that runs, until its outcome is in."""
        self.deferred: BaseException | None = None
        """A failure reported while a Spark job runs: recovered from once the job has ended."""

    # -- the step ------------------------------------------------------------------

    def next_step(self, facts: Facts) -> Decision:
        """What to do next, given what happened since the previous step."""
        effects: list[Effect] = []
        failure = self._apply_outcome(facts, effects)
        for started in facts.started:
            self._savepoint_started(started, effects)
        for event in facts.events:
            failure = self._apply_event(event, effects) or failure
        for request in facts.requests:
            self._request(request, effects)
        if self.running is not None and self.fatal is None:
            # Nothing else runs beside a Spark job but a barrier's delivery: restoring
            # waits for its end.
            self.deferred = self.deferred or failure
            return Decision(tuple(effects), self._beside_the_job())
        failure, self.deferred = failure or self.deferred, None
        action = self._action(facts.now, failure, effects)
        return Decision(tuple(effects), action)

    # -- outcomes --------------------------------------------------------------

    def _apply_outcome(self, facts: Facts, effects: list[Effect]) -> BaseException | None:
        outcome = facts.outcome
        if isinstance(outcome, Restored):
            self._restored(outcome.point, effects)
        elif isinstance(outcome, RestoreFailed):
            # The target does not fit the job: restoring it again cannot help.
            self.restoring = None
            self.fatal = outcome.error
        elif isinstance(outcome, InputPlanned):
            generation = self._current()
            generation.pending_input = outcome
            if not outcome.available:
                generation.position, generation.exhausted = outcome.position, outcome.exhausted
        elif isinstance(outcome, EpochSucceeded):
            self._epoch_succeeded(outcome.epoch, effects)
        elif isinstance(outcome, EpochFailed):
            self.running = None
            effects.append(Log(f"epoch {outcome.epoch} failed: {_first_line(outcome.error)}"))
            return outcome.error
        elif isinstance(outcome, BarrierDelivered):
            self._barrier_delivered(outcome, effects)
        return None

    def _beside_the_job(self) -> Action:
        """Awaits the running Spark job, or first hands the hosts a barrier cut at the newest
        final epoch: the coordinator takes that cut while a job runs only before any of its
        tasks began an epoch, so the hosts still hold exactly its state, and the checkpoint
        need not wait for the job's input to be read and shuffled."""
        generation = self.generation
        if (
            self.options.in_job_cuts
            and self.deferred is None
            and generation is not None
            and generation.undelivered
            and generation.undelivered[0].cut == generation.final_epoch
        ):
            return self._deliver_oldest(generation)
        return AwaitJob(IDLE_POLL_S)

    def _deliver_oldest(self, generation: _Generation) -> DeliverBarrier:
        return DeliverBarrier(
            generation.undelivered[0],
            generation.number,
            self._operator_orders(generation),
            self._incremental_base(),
        )

    def _barrier_delivered(self, outcome: BarrierDelivered, effects: list[Effect]) -> None:
        generation = self._current()
        if not generation.undelivered:
            return
        barrier = generation.undelivered.pop(0)
        if outcome.error is None:
            return
        if self.running is not None:
            effects.append(
                Log(
                    f"the barrier of {barrier.kind} {barrier.id} did not reach every state host "
                    f"({_first_line(outcome.error)}); the running job's tasks take it at their start"
                )
            )
            return
        # The tasks of the next epoch carry it; hosts that took it already ignore it.
        generation.barrier = barrier
        effects.append(
            Log(
                f"the barrier of {barrier.kind} {barrier.id} did not reach every state host "
                f"({_first_line(outcome.error)}); the next epoch's tasks carry it"
            )
        )

    def _restored(self, point: RestorePoint, effects: list[Effect]) -> None:
        assert self.restoring is not None, "a restore outcome without a restore"
        number = self.restoring.generation
        self.restoring = None
        self.started = True
        self.generation = _Generation(
            number, point, final_epoch=point.cut, position=point.positions.get(self.options.source_uid)
        )
        self.epoch = max(self.epoch, point.cut or 0, point.sink_high_water)
        if point.path is not None:
            dropped = f"; dropped state of {', '.join(point.dropped)}" if point.dropped else ""
            effects.append(
                Log(
                    f"restored from {point.path} (checkpoint {point.checkpoint_id}, "
                    f"cut epoch {point.cut}){dropped}"
                )
            )
            # Output the restored checkpoint covers is published by the sink's recovery.
            self.published_up_to = max(self.published_up_to, point.cut or 0)

    def _epoch_succeeded(self, epoch: int, effects: list[Effect]) -> None:
        generation = self._current()
        self.epochs_succeeded += len(self.running.epochs) if self.running is not None else 1
        self.running = None
        generation.final_epoch = epoch
        planned = generation.pending_input
        if planned is not None and planned.available:
            generation.position, generation.exhausted = planned.position, planned.exhausted
            generation.last_data_epoch = epoch
        generation.pending_input = None
        generation.barrier = None
        generation.recorded = True
        effects.append(RecordFinal(epoch, {self.options.source_uid: generation.position}))
        self.recorded_final = True
        if not self.options.exactly_once:
            effects.append(Publish(epoch))
            self.published_up_to = epoch
        elif self._last_output_waits(generation, epoch):
            # Flink waits for the next periodic checkpoint to commit a bounded
            # job's last output; asking for it now saves up to an interval.
            effects.append(RequestCheckpoint())

    def _last_output_waits(self, generation: _Generation, epoch: int) -> bool:
        """``epoch`` ended the input and no triggered checkpoint will take it as its cut."""
        return (
            self.options.checkpointing
            and generation.exhausted
            and generation.last_data_epoch == epoch
            and generation.cut_wanted is None
        )

    # -- coordinator events ----------------------------------------------------

    def _apply_event(self, event: CoordinatorEvent, effects: list[Effect]) -> BaseException | None:
        generation = self.generation
        if isinstance(event, CheckpointTriggered):
            if generation is not None:
                generation.cut_wanted = event.id
        elif isinstance(event, BarrierInjected):
            if generation is not None:
                if generation.cut_wanted == event.id:
                    generation.cut_wanted = None
                else:
                    # An older checkpoint took the cut: the newest still waits for one.
                    generation.cut_asked = None
                if self.options.deliver_barriers:
                    generation.undelivered.append(event)
                else:
                    generation.barrier = event
        elif isinstance(event, CheckpointCompleted):
            self._completed(event, effects)
        elif isinstance(event, CheckpointAborted):
            if generation is not None and generation.cut_wanted == event.id:
                generation.cut_wanted = None
            effects.append(CancelUploads(event.id))
            effects.append(Log(f"{event.kind} {event.id} aborted: {event.reason}"))
            request = self.awaiting.pop(event.id, None)
            if request is not None:
                effects.append(
                    ResolveSavepoint(request, error=f"savepoint {event.id} failed: {event.reason}")
                )
            if event.id == self.stop_savepoint:
                # The job goes on; the user may ask again.
                self.stop_savepoint = None
                self.stop_requested = False
        elif isinstance(event, CheckpointSubsumed):
            effects.append(Log(f"checkpoints {list(event.ids)} subsumed", debug=True))
        elif isinstance(event, JobFailed):
            return WeirError(
                f"{event.consecutive_failures} consecutive checkpoint failures, more than tolerated; "
                f"last: {event.reason}"
            )
        elif isinstance(event, CleanupFailed):
            effects.append(Log(f"cleanup of old checkpoints failed: {event.message}"))
        elif isinstance(event, LeaseLost):
            # Another run owns the job directory now: failing over would fight it.
            self.fatal = WeirError(f"this run lost its lease on the job directory: {event.message}")
        return None

    def _completed(self, event: CheckpointCompleted, effects: list[Effect]) -> None:
        stop = event.kind == "savepoint" and event.id == self.stop_savepoint
        commits = event.kind == "checkpoint" or stop
        if commits:
            if self.options.exactly_once and event.cut > self.published_up_to:
                effects.append(Publish(event.cut))
            self.published_up_to = max(self.published_up_to, event.cut)
            self.lineage_head = event.path
            self.notify = event.id
        if event.kind == "checkpoint":
            self.checkpoints.append(event.id)
        self.completed.append((event.id, event.cut, self.epoch))
        request = self.awaiting.pop(event.id, None)
        if request is not None:
            effects.append(ResolveSavepoint(request, path=event.path))
        if stop:
            self.finished_savepoint = event.path
        effects.append(Log(f"{event.kind} {event.id} complete (cut epoch {event.cut})"))

    # -- savepoint requests ----------------------------------------------------

    def _request(self, request: SavepointRequest, effects: list[Effect]) -> None:
        if request.stop and (self.stop_requested or self.finished_savepoint is not None):
            effects.append(ResolveSavepoint(request, error="the job is already stopping with a savepoint"))
            return
        if request.stop:
            self.stop_requested = True
        effects.append(TriggerSavepoint(request))

    def _savepoint_started(self, started: SavepointStarted, effects: list[Effect]) -> None:
        self.awaiting[started.checkpoint_id] = started.request
        if started.request.stop:
            self.stop_savepoint = started.checkpoint_id

    # -- the next action -------------------------------------------------------

    def _action(self, now: float, failure: BaseException | None, effects: list[Effect]) -> Action:
        if self.fatal is not None:
            return Fail(self.fatal)
        if failure is not None:
            return self._recover(now, failure, effects)
        if self.restoring is not None:
            # The shell answers a restore before anything else happens.
            return self.restoring
        if not self.started:
            self.restoring = Restore(self.options.origin, 1, first=True)
            return self.restoring
        generation = self._current()
        if self.recorded_final:
            # The coordinator may take the epoch just recorded as a checkpoint's
            # cut; its barrier must travel with the very next epoch, so look at
            # its events before running one.
            self.recorded_final = False
            return Wait(0.0)
        if generation.undelivered:
            return self._deliver_oldest(generation)
        if self.finished_savepoint is not None:
            return Finish(self.finished_savepoint)
        if self.options.max_epochs is not None and self.epochs_succeeded >= self.options.max_epochs:
            return Finish()
        wants_input = not generation.exhausted and not self.stop_requested
        if wants_input and generation.pending_input is None:
            return PlanInput(self._epochs_wanted(generation))
        if wants_input and generation.pending_input is not None and generation.pending_input.available:
            return RunEpoch(self._order(generation, data=True))
        generation.pending_input = None
        if generation.exhausted and not self.stop_requested and self._output_settled(generation, effects):
            return Finish()
        if self._may_cut_at_last_final(generation):
            # Nothing runs: the newest final epoch is as good a cut as a new one.
            generation.cut_asked = generation.cut_wanted
            effects.append(CutAtLastFinal())
            return Wait(0.0)
        if generation.barrier is not None or generation.cut_wanted is not None:
            # A checkpoint needs a final epoch for its cut, or its barrier must
            # reach every subtask: run an epoch without data.
            return RunEpoch(self._order(generation, data=False))
        return Wait(IDLE_POLL_S)

    def _may_cut_at_last_final(self, generation: _Generation) -> bool:
        """A triggered checkpoint waits for a cut, and its barrier can go to the hosts directly
        (an epoch with the barrier would need running otherwise): offered once per checkpoint."""
        return (
            self.options.deliver_barriers
            and generation.recorded
            and generation.barrier is None
            and generation.cut_wanted is not None
            and generation.cut_asked != generation.cut_wanted
        )

    def _output_settled(self, generation: _Generation, effects: list[Effect]) -> bool:
        """A bounded job ends once the output of its last data epoch is published."""
        last = generation.last_data_epoch
        if last is None or last <= self.published_up_to:
            return True
        if not self.options.exactly_once:
            return True
        if not self.options.checkpointing:
            # No checkpoint will ever cover the output: publish it at the end.
            effects.append(Publish(last))
            self.published_up_to = last
            return True
        return False

    def _operator_orders(self, generation: _Generation) -> tuple[OperatorOrder, ...]:
        point = generation.point
        return tuple(self._operator_order(uid, generation, point) for uid in self.options.operators)

    def _incremental_base(self) -> int | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def _epochs_wanted(self, generation: _Generation) -> int:
        """How many epochs the next Spark job may run (see :meth:`_epochs_allowed`)."""
        any_final = generation.final_epoch is not None
        return max(1, self._epochs_allowed(self.epochs_succeeded, any_final=any_final))

    def epochs_after_running(self) -> int:
        """How many epochs the Spark job after the running one may run if the running one
        succeeds (its last epoch is final then): the runner plans that job's input while this
        one runs. 0 when the running job spends the epoch budget."""
        running = len(self.running.epochs) if self.running is not None else 0
        return self._epochs_allowed(self.epochs_succeeded + running, any_final=True)

    def _epochs_allowed(self, succeeded: int, *, any_final: bool) -> int:
        """As configured, within what is left of the epoch budget after ``succeeded`` epochs;
        one while no epoch is final and checkpoints are taken. Until then a checkpoint has no
        cut to take before its tasks' first boundary, which comes after the job's first stage
        scanned the input of every epoch it runs (at 20M events, the first checkpoints of a
        run with jobs of four epochs completed 2.6-3.2 s after their trigger)."""
        if not any_final and self.options.checkpointing:
            return 1
        wanted = self.options.epochs_per_job
        if self.options.max_epochs is not None:
            wanted = min(wanted, self.options.max_epochs - succeeded)
        return max(0, wanted)

    def _order(self, generation: _Generation, *, data: bool) -> EpochOrder:
        planned = generation.pending_input
        after = (
            (*planned.earlier, planned.position) if data and planned is not None else (generation.position,)
        )
        epochs = tuple(range(self.epoch + 1, self.epoch + 1 + len(after)))
        self.epoch = epochs[-1]
        source = self.options.source_uid
        self.running = EpochOrder(
            epochs=epochs,
            generation=generation.number,
            data=data,
            barrier=generation.barrier,
            notify_complete=self.notify,
            pending_checkpoint=generation.cut_wanted,
            operators=self._operator_orders(generation),
            incremental_base=self._incremental_base(),
            positions=tuple({source: p} for p in after) if self.options.in_job_cuts else None,
        )
        return self.running

    @staticmethod
    def _operator_order(uid: str, generation: _Generation, point: RestorePoint) -> OperatorOrder:
        if uid in point.restored_operators:
            return OperatorOrder(uid, generation.final_epoch, point.path, point.checkpoint_id, point.cut)
        # An operator that starts empty in this generation has held nothing
        # final before the generation's first epoch became final.
        ran_here = generation.final_epoch is not None and generation.final_epoch != point.cut
        return OperatorOrder(uid, generation.final_epoch if ran_here else None, None, None, None)

    def _recover(self, now: float, failure: BaseException, effects: list[Effect]) -> Action:
        strategy = self.options.restart_strategy
        if not strategy.on_failure(now):
            return Fail(
                WeirError(
                    f"the job failed {strategy.failures} times, more than its restart strategy allows; "
                    f"last failure: {_first_line(failure)}"
                )
            )
        self.restarts += 1
        self.recorded_final = False
        self.running = None
        for checkpoint_id, request in self.awaiting.items():
            effects.append(CancelUploads(checkpoint_id))
            effects.append(
                ResolveSavepoint(request, error="the job failed and restarted before the savepoint completed")
            )
        self.awaiting.clear()
        self.stop_savepoint = None
        self.stop_requested = False
        number = self._current().number + 1 if self.generation is not None else 1
        self.generation = None
        self.restoring = Restore(self.lineage_head, number, delay_s=strategy.delay_s)
        return self.restoring

    def _current(self) -> _Generation:
        assert self.generation is not None, "no generation: the job has not been restored yet"
        return self.generation


def _first_line(error: BaseException) -> str:
    """The most telling line of an error: the innermost ``SomeError: message`` if any."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit): ", line)]
    if raised:
        return raised[-1]
    return lines[0] if lines else type(error).__name__
