"""The pure driver of a stream job, step by step, without Spark.

Each test plays the shell: it feeds :class:`Facts` (outcomes of the previous
action, coordinator events, requests) and checks the :class:`Decision`.
"""

from __future__ import annotations

from typing import Any

import pytest

from weir.coordinator import (
    BarrierInjected,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointTriggered,
    JobFailed,
    LeaseLost,
)
from weir.exceptions import StateLostError
from weir.spark.driver import (
    AwaitJob,
    BarrierDelivered,
    CancelUploads,
    CutAtLastFinal,
    DeliverBarrier,
    Driver,
    DriverOptions,
    EpochFailed,
    EpochOrder,
    EpochSucceeded,
    Facts,
    Fail,
    Finish,
    InputPlanned,
    Log,
    PlanInput,
    Publish,
    RecordFinal,
    RequestCheckpoint,
    ResolveSavepoint,
    Restore,
    Restored,
    RestoreFailed,
    RestorePoint,
    RunEpoch,
    SavepointRequest,
    SavepointStarted,
    TriggerSavepoint,
    Wait,
)
from weir.spark.restart import fixed_delay, no_restart

SOURCE = "events"


class Shell:
    """Feeds the driver and remembers what it decided."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("operators", ("avg",))
        options.setdefault("source_uid", SOURCE)
        self.driver = Driver(DriverOptions(**options))
        self.now = 0.0
        self.effects: list[Any] = []

    def step(self, outcome: Any = None, events: tuple[Any, ...] = (), **facts: Any) -> Any:
        self.now += 1.0
        decision = self.driver.next_step(Facts(now=self.now, outcome=outcome, events=events, **facts))
        self.effects.extend(decision.effects)
        return decision

    def start(self, point: RestorePoint | None = None) -> Any:
        """The first restore, answered; returns the next decision."""
        first = self.step()
        assert isinstance(first.action, Restore) and first.action.first
        return self.step(Restored(point or RestorePoint.empty()))

    def run_data_epoch(
        self, position: int, exhausted: bool = False, events: tuple[Any, ...] = ()
    ) -> EpochOrder:
        """Plans input, runs the epoch it orders, and reports success."""
        decision = self.step(InputPlanned(True, {"next": position}, exhausted), events)
        assert isinstance(decision.action, RunEpoch), decision
        order = decision.action.order
        assert order.data
        self.last = self.succeed(order.epoch)
        return order

    def succeed(self, epoch: int, events: tuple[Any, ...] = ()) -> Any:
        """Reports an epoch's success; the driver looks at the coordinator's
        answer (``events``) before it decides anything else."""
        sync = self.step(EpochSucceeded(epoch))
        assert sync.action == Wait(0.0), sync
        return self.step(None, events)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.effects if isinstance(e, kind)]


def completed(id: int, cut: int, kind: str = "checkpoint", path: str | None = None) -> CheckpointCompleted:
    return CheckpointCompleted(id, kind, cut, path or f"file:///ckpt/job/chk-{id}")


def barrier(id: int, cut: int, kind: str = "checkpoint") -> BarrierInjected:
    return BarrierInjected(id, kind, cut, "file:///ckpt/job")


def test_a_fresh_start_restores_nothing_then_plans_input() -> None:
    shell = Shell()
    decision = shell.start()
    assert isinstance(decision.action, PlanInput)


def test_final_epochs_are_recorded_with_the_source_position() -> None:
    shell = Shell()
    shell.start()
    order = shell.run_data_epoch(100)
    assert order.epoch == 1
    assert shell.of(RecordFinal) == [RecordFinal(1, {SOURCE: {"next": 100}})]
    assert isinstance(shell.last.action, PlanInput)


def test_a_barrier_only_epoch_runs_when_a_checkpoint_is_pending_and_input_is_idle() -> None:
    shell = Shell()
    shell.start()
    shell.run_data_epoch(100)
    # No new input; the coordinator triggered checkpoint 1: its cut needs a final epoch.
    decision = shell.step(InputPlanned(False, {"next": 100}, False), (CheckpointTriggered(1, "checkpoint"),))
    assert isinstance(decision.action, RunEpoch)
    order = decision.action.order
    assert not order.data and order.pending_checkpoint == 1 and order.barrier is None
    decision = shell.succeed(order.epoch, (barrier(1, order.epoch),))
    # The barrier must still reach every subtask: another epoch without data.
    decision = shell.step(InputPlanned(False, {"next": 100}, False))
    assert isinstance(decision.action, RunEpoch)
    assert decision.action.order.barrier == barrier(1, order.epoch)
    assert not decision.action.order.data
    decision = shell.succeed(decision.action.order.epoch)
    decision = shell.step(InputPlanned(False, {"next": 100}, False))
    assert isinstance(decision.action, Wait), "nothing pending: the driver waits"


def test_output_is_published_when_a_checkpoint_completes_and_notified_to_functions() -> None:
    shell = Shell()
    shell.start()
    shell.run_data_epoch(100)
    shell.step(None, (completed(1, 1),))
    assert shell.of(Publish) == [Publish(1)]
    order = shell.run_data_epoch(200)
    assert order.notify_complete == 1


def test_an_intermediate_savepoint_publishes_nothing() -> None:
    shell = Shell(origin=None)
    shell.start()
    shell.run_data_epoch(100)
    request = SavepointRequest("file:///savepoints", stop=False)
    decision = shell.step(None, requests=(request,))
    assert TriggerSavepoint(request) in decision.effects
    shell.step(None, started=(SavepointStarted(request, 1),))
    decision = shell.step(None, (completed(1, 1, "savepoint", "file:///savepoints/sp-1"),))
    assert shell.of(Publish) == []
    assert ResolveSavepoint(request, path="file:///savepoints/sp-1") in decision.effects
    # A failure restores the origin (no checkpoint completed), never the savepoint.
    decision = shell.step(EpochFailed(2, RuntimeError("task lost")))
    assert isinstance(decision.action, Restore) and decision.action.path is None


def test_stop_with_savepoint_publishes_its_cut_and_finishes() -> None:
    shell = Shell()
    shell.start()
    shell.run_data_epoch(100)
    request = SavepointRequest("file:///savepoints", stop=True)
    shell.step(None, requests=(request,))
    decision = shell.step(None, started=(SavepointStarted(request, 3),))
    # No more input is planned once a stop is requested; the savepoint needs a cut.
    assert isinstance(decision.action, Wait)
    decision = shell.step(None, (CheckpointTriggered(3, "savepoint"),))
    assert isinstance(decision.action, RunEpoch) and not decision.action.order.data
    cut = decision.action.order.epoch
    decision = shell.succeed(cut, (barrier(3, cut, "savepoint"),))
    assert isinstance(decision.action, RunEpoch) and decision.action.order.barrier is not None
    decision = shell.succeed(decision.action.order.epoch)
    decision = shell.step(None, (completed(3, cut, "savepoint", "file:///savepoints/sp-3"),))
    assert Publish(cut) in decision.effects, "a stop-with-savepoint commits the output it covers"
    assert ResolveSavepoint(request, path="file:///savepoints/sp-3") in decision.effects
    assert decision.action == Finish("file:///savepoints/sp-3")


def test_an_aborted_stop_savepoint_lets_the_job_go_on() -> None:
    shell = Shell()
    shell.start()
    request = SavepointRequest("file:///savepoints", stop=True)
    shell.step(None, requests=(request,))
    shell.step(None, started=(SavepointStarted(request, 1),))
    decision = shell.step(None, (CheckpointAborted(1, "savepoint", "timeout"),))
    assert CancelUploads(1) in decision.effects
    assert any(isinstance(e, ResolveSavepoint) and e.error for e in decision.effects)
    assert isinstance(decision.action, PlanInput)


def test_recovery_restores_the_newest_checkpoint_of_this_run() -> None:
    shell = Shell(restart_strategy=fixed_delay(3, 0.25))
    shell.start()
    shell.run_data_epoch(100)
    shell.run_data_epoch(200)
    shell.step(None, (completed(1, 1),))
    decision = shell.step(EpochFailed(3, RuntimeError("Python worker exited unexpectedly")))
    assert decision.action == Restore("file:///ckpt/job/chk-1", 2, delay_s=0.25)
    point = RestorePoint("file:///ckpt/job/chk-1", 1, 1, {SOURCE: {"next": 100}}, frozenset({"avg"}), 3)
    decision = shell.step(Restored(point))
    assert isinstance(decision.action, PlanInput)
    order = shell.run_data_epoch(200)
    # Epoch numbers never repeat: after 3 (failed), and past the sink's high water mark.
    assert order.epoch == 4
    assert order.generation == 2
    (avg,) = order.operators
    assert (avg.final_epoch, avg.restore_from, avg.restored_checkpoint, avg.restore_cut) == (
        1,
        "file:///ckpt/job/chk-1",
        1,
        1,
    )


def test_a_failover_stays_on_the_timeline_the_run_restored() -> None:
    origin = "file:///ckpt/job/chk-4"
    shell = Shell(origin=origin)
    decision = shell.step()
    assert decision.action == Restore(origin, 1, first=True)
    point = RestorePoint(origin, 4, 9, {SOURCE: {"next": 400}}, frozenset({"avg"}), 12)
    shell.step(Restored(point))
    order = shell.run_data_epoch(500)
    assert order.epoch == 13, "new epochs come after every epoch the sink has seen"
    decision = shell.step(EpochFailed(14, RuntimeError("executor lost")))
    assert isinstance(decision.action, Restore) and decision.action.path == origin


def test_an_operator_new_to_the_restored_state_starts_empty() -> None:
    origin = "file:///savepoints/sp-2"
    shell = Shell(origin=origin, operators=("avg", "top"))
    shell.step()
    shell.step(Restored(RestorePoint(origin, 2, 5, {}, frozenset({"avg"}), 5)))
    order = shell.run_data_epoch(10)
    avg, top = order.operators
    assert avg.final_epoch == 5 and avg.restored_checkpoint == 2
    assert (top.final_epoch, top.restore_from, top.restored_checkpoint) == (None, None, None)
    second = shell.run_data_epoch(20)
    assert second.operators[1].final_epoch == order.epoch


def test_exhausted_bounded_input_waits_for_the_publishing_checkpoint() -> None:
    shell = Shell()
    shell.start()
    shell.run_data_epoch(50)
    assert shell.of(RequestCheckpoint) == [], "input is still coming"
    order = shell.run_data_epoch(100, exhausted=True)
    assert isinstance(shell.last.action, Wait), "the last output is not yet published"
    assert shell.of(RequestCheckpoint) == [RequestCheckpoint()], "the checkpoint is asked for, not waited for"
    decision = shell.step(None, (CheckpointTriggered(1, "checkpoint"),))
    assert isinstance(decision.action, RunEpoch) and not decision.action.order.data
    cut = decision.action.order.epoch
    decision = shell.succeed(cut, (barrier(1, cut),))
    assert isinstance(decision.action, RunEpoch)
    decision = shell.succeed(decision.action.order.epoch, (completed(1, cut),))
    assert Publish(cut) in decision.effects
    assert cut > order.epoch
    assert decision.action == Finish()
    assert shell.of(RequestCheckpoint) == [RequestCheckpoint()], "asked once"


def test_a_checkpoint_already_triggered_takes_the_last_epoch_without_a_request() -> None:
    shell = Shell()
    shell.start()
    shell.run_data_epoch(50)
    # Triggered while the last epoch runs: it takes that epoch as its cut.
    shell.run_data_epoch(100, exhausted=True, events=(CheckpointTriggered(1, "checkpoint"),))
    assert shell.of(RequestCheckpoint) == []


def test_without_checkpointing_exactly_once_output_is_published_at_the_end() -> None:
    shell = Shell(checkpointing=False)
    shell.start()
    shell.run_data_epoch(100, exhausted=True)
    assert Publish(1) in shell.last.effects
    assert shell.last.action == Finish()


def test_at_least_once_publishes_every_epoch_when_it_succeeds() -> None:
    shell = Shell(exactly_once=False)
    shell.start()
    shell.run_data_epoch(100)
    assert shell.of(Publish) == [Publish(1)]


def test_the_restart_strategy_bounds_restores() -> None:
    shell = Shell(restart_strategy=no_restart())
    shell.start()
    decision = shell.step(EpochFailed(1, RuntimeError("boom")))
    assert isinstance(decision.action, Fail)
    assert "restart strategy" in str(decision.action.error)


def test_too_many_checkpoint_failures_restore_the_job() -> None:
    shell = Shell()
    shell.start()
    decision = shell.step(None, (JobFailed("timeout", 1, None),))
    assert isinstance(decision.action, Restore) and decision.action.path is None


def test_a_restore_target_that_does_not_fit_fails_the_job_without_retrying() -> None:
    shell = Shell(origin="file:///savepoints/sp-1")
    shell.step()
    error = ValueError("savepoint has state of operator 'avg' that the job does not have")
    decision = shell.step(RestoreFailed(error))
    assert decision.action == Fail(error)


def test_losing_the_lease_fails_the_job_at_once() -> None:
    shell = Shell()
    shell.start()
    decision = shell.step(None, (LeaseLost("held by run 1234 on another host"),))
    assert isinstance(decision.action, Fail)
    assert "lease" in str(decision.action.error)


def test_savepoints_in_flight_fail_and_cancel_their_uploads_on_a_restart() -> None:
    shell = Shell()
    shell.start()
    request = SavepointRequest("file:///savepoints", stop=False)
    shell.step(None, requests=(request,))
    shell.step(None, started=(SavepointStarted(request, 7),))
    decision = shell.step(EpochFailed(1, RuntimeError("boom")))
    assert CancelUploads(7) in decision.effects
    (resolved,) = [e for e in decision.effects if isinstance(e, ResolveSavepoint)]
    assert resolved.request is request and resolved.error


@pytest.mark.parametrize("max_epochs", [1, 2])
def test_max_epochs_ends_the_job(max_epochs: int) -> None:
    shell = Shell(max_epochs=max_epochs)
    shell.start()
    for i in range(max_epochs):
        shell.run_data_epoch(100 * (i + 1))
    assert shell.last.action == Finish()


def test_the_epoch_after_a_cut_carries_its_barrier() -> None:
    # The coordinator answers an epoch becoming final with the barrier of a
    # pending checkpoint; running another epoch before looking would let the
    # barrier arrive one epoch late, after state past its cut was committed.
    shell = Shell()
    shell.start()
    decision = shell.step(InputPlanned(True, {"next": 100}, False), (CheckpointTriggered(1, "checkpoint"),))
    order = decision.action.order
    assert order.pending_checkpoint == 1
    sync = shell.step(EpochSucceeded(order.epoch))
    assert sync.action == Wait(0.0)
    assert RecordFinal(order.epoch, {SOURCE: {"next": 100}}) in sync.effects
    shell.step(None, (barrier(1, order.epoch),))
    decision = shell.step(InputPlanned(True, {"next": 200}, False))
    assert decision.action.order.barrier == barrier(1, order.epoch)


def test_incremental_checkpoints_build_on_the_newest_checkpoint_of_this_run() -> None:
    # The base an incremental checkpoint references must be retained: the
    # newest completed checkpoint of this run (a savepoint never is one, and
    # a checkpoint of an earlier run may be gone).
    shell = Shell(origin="file:///ckpt/job/chk-7")
    shell.start(RestorePoint("file:///ckpt/job/chk-7", 7, 0, {SOURCE: {"next": 0}}, frozenset({"avg"}), 0))
    assert shell.run_data_epoch(100).incremental_base is None
    shell.step(None, (completed(8, 1),))
    assert shell.run_data_epoch(200).incremental_base == 8
    shell.step(None, (completed(9, 2, "savepoint", "file:///savepoints/sp-9"),))
    assert shell.run_data_epoch(300).incremental_base == 8
    shell.step(None, (completed(10, 3),))
    assert shell.run_data_epoch(400).incremental_base == 10


def _barrier_injected(shell: Shell) -> tuple[int, Any]:
    """Runs an epoch that checkpoint 1 takes as its cut; returns the cut and the decision
    after its barrier was injected."""
    shell.start()
    decision = shell.step(InputPlanned(True, {"next": 100}, False), (CheckpointTriggered(1, "checkpoint"),))
    cut = decision.action.order.epoch
    shell.step(EpochSucceeded(cut))
    return cut, shell.step(None, (barrier(1, cut),))


def test_a_delivered_barrier_goes_to_the_hosts_before_the_next_epoch() -> None:
    shell = Shell(deliver_barriers=True)
    cut, decision = _barrier_injected(shell)
    assert isinstance(decision.action, DeliverBarrier)
    assert decision.action.barrier == barrier(1, cut)
    assert [o.final_epoch for o in decision.action.operators] == [cut]
    decision = shell.step(BarrierDelivered(1))
    assert isinstance(decision.action, PlanInput)
    decision = shell.step(InputPlanned(True, {"next": 200}, False))
    assert decision.action.order.barrier is None, "the tasks need not carry it"


def test_a_barrier_the_hosts_did_not_all_take_travels_with_the_next_epoch() -> None:
    shell = Shell(deliver_barriers=True)
    cut, _ = _barrier_injected(shell)
    decision = shell.step(BarrierDelivered(1, StateLostError("the host of subtask 1 is gone")))
    assert any("did not reach every state host" in e.message for e in decision.effects if isinstance(e, Log))
    decision = shell.step(InputPlanned(True, {"next": 200}, False))
    assert decision.action.order.barrier == barrier(1, cut)


def test_a_bounded_job_ends_without_an_epoch_for_its_last_barrier() -> None:
    shell = Shell(deliver_barriers=True)
    shell.start()
    last = shell.run_data_epoch(100, exhausted=True).epoch
    decision = shell.step(None, (CheckpointTriggered(1, "checkpoint"),))
    # Nothing runs: the last data epoch is the cut, no epoch is run for it.
    assert CutAtLastFinal() in decision.effects
    assert decision.action == Wait(0.0)
    decision = shell.step(None, (barrier(1, last),))
    assert isinstance(decision.action, DeliverBarrier)
    decision = shell.step(BarrierDelivered(1))
    assert isinstance(decision.action, Wait), "no epoch runs for the barrier"
    decision = shell.step(None, (completed(1, last),))
    assert Publish(last) in decision.effects
    assert decision.action == Finish()
    assert shell.of(CutAtLastFinal) == [CutAtLastFinal()], "offered once"


def test_without_a_final_epoch_of_its_own_a_generation_runs_an_epoch_for_the_cut() -> None:
    # Right after a restore the coordinator holds no cut of this generation.
    shell = Shell(deliver_barriers=True)
    shell.start(RestorePoint("file:///ckpt/job/chk-1", 1, 4, {SOURCE: {"next": 100}}, frozenset({"avg"}), 4))
    decision = shell.step(InputPlanned(False, {"next": 100}, False), (CheckpointTriggered(2, "checkpoint"),))
    assert shell.of(CutAtLastFinal) == []
    assert isinstance(decision.action, RunEpoch) and not decision.action.order.data


def test_a_cut_the_coordinator_did_not_give_is_made_by_an_epoch() -> None:
    shell = Shell(deliver_barriers=True)
    shell.start()
    shell.run_data_epoch(100, exhausted=True)
    shell.step(None, (CheckpointTriggered(1, "checkpoint"),))
    decision = shell.step(None)
    assert isinstance(decision.action, RunEpoch) and not decision.action.order.data


def test_a_stop_savepoint_triggered_after_a_checkpoint_gets_a_cut_of_its_own() -> None:
    # Checkpoint 5 waits for a cut when savepoint 6 is triggered; the idle
    # cut goes to the older one, so the savepoint is offered the next.
    shell = Shell(deliver_barriers=True)
    shell.start()
    shell.run_data_epoch(100)
    request = SavepointRequest("file:///savepoints", stop=True)
    decision = shell.step(None, (CheckpointTriggered(5, "checkpoint"),), requests=(request,))
    assert CutAtLastFinal() in decision.effects
    decision = shell.step(
        None, (CheckpointTriggered(6, "savepoint"),), started=(SavepointStarted(request, 6),)
    )
    assert CutAtLastFinal() in decision.effects
    last = shell.driver.epoch
    decision = shell.step(None, (barrier(5, last),))
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier.id == 5
    decision = shell.step(BarrierDelivered(5))
    assert decision.effects.count(CutAtLastFinal()) == 1, "the savepoint still waits for a cut"
    decision = shell.step(None, (barrier(6, last, "savepoint"),))
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier.id == 6
    shell.step(BarrierDelivered(6))
    decision = shell.step(None, (completed(6, last, "savepoint", "file:///savepoints/sp-6"),))
    assert decision.action == Finish("file:///savepoints/sp-6")


def test_an_aborted_checkpoint_no_longer_waits_for_a_cut() -> None:
    shell = Shell(deliver_barriers=True)
    shell.start()
    decision = shell.step(InputPlanned(False, {"next": 0}, False), (CheckpointTriggered(1, "checkpoint"),))
    assert isinstance(decision.action, RunEpoch) and not decision.action.order.data
    decision = shell.step(None, (CheckpointAborted(1, "checkpoint", "expired"),))
    assert isinstance(decision.action, AwaitJob) and CancelUploads(1) in decision.effects
    decision = shell.succeed(shell.driver.epoch)
    assert isinstance(decision.action, PlanInput)
    decision = shell.step(InputPlanned(False, {"next": 0}, False))
    assert isinstance(decision.action, Wait), "no epoch runs for an aborted checkpoint"


def test_one_spark_job_runs_the_epochs_whose_input_waits() -> None:
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    decision = shell.start()
    assert decision.action == PlanInput(1), "no epoch is final yet: the first job runs one"
    shell.run_data_epoch(100)
    assert shell.last.action == PlanInput(4)
    decision = shell.step(InputPlanned(True, {"next": 400}, False, ({"next": 200}, {"next": 300})))
    assert isinstance(decision.action, RunEpoch)
    order = decision.action.order
    assert order.epochs == (2, 3, 4) and order.epoch == 4
    # What a checkpoint cut after each epoch records, for cuts while the job runs.
    assert order.positions == ({SOURCE: {"next": 200}}, {SOURCE: {"next": 300}}, {SOURCE: {"next": 400}})
    shell.succeed(4)
    assert shell.of(RecordFinal) == [
        RecordFinal(1, {SOURCE: {"next": 100}}),
        RecordFinal(4, {SOURCE: {"next": 400}}),
    ]
    assert shell.driver.epochs_succeeded == 4
    # Without in-job cuts (the tasks do not stage the output), no positions go to the tasks.
    plain = Shell(epochs_per_job=2)
    plain.start()
    plain.run_data_epoch(100)
    decision = plain.step(InputPlanned(True, {"next": 300}, False, ({"next": 200},)))
    assert decision.action.order.epochs == (2, 3) and decision.action.order.positions is None


def test_without_checkpoints_the_first_job_runs_several_epochs() -> None:
    # No checkpoint waits for a cut, so nothing is gained by a short first job.
    decision = Shell(epochs_per_job=4, checkpointing=False).start()
    assert decision.action == PlanInput(4)


def test_a_restored_generation_runs_several_epochs_from_its_first_job() -> None:
    # The restored checkpoint's cut is final: a checkpoint triggered before the
    # job's first boundary takes it.
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.run_data_epoch(100)
    shell.step(None, (completed(1, 1),))
    decision = shell.step(EpochFailed(2, RuntimeError("Python worker exited unexpectedly")))
    assert isinstance(decision.action, Restore)
    point = RestorePoint("file:///ckpt/job/chk-1", 1, 1, {SOURCE: {"next": 100}}, frozenset({"avg"}), 2)
    decision = shell.step(Restored(point))
    assert decision.action == PlanInput(4)


def test_the_input_planned_ahead_is_what_the_next_job_may_run() -> None:
    # The runner plans the next job's input while a job runs, with this count.
    shell = Shell(epochs_per_job=4, max_epochs=7, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.step(InputPlanned(True, {"next": 100}, False))
    assert shell.driver.epochs_after_running() == 4, "the first job's epoch is final once it ran"
    assert shell.succeed(1).action == PlanInput(4)
    shell.step(InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400})))
    assert shell.driver.epochs_after_running() == 2
    assert shell.succeed(5).action == PlanInput(2)
    shell.step(InputPlanned(True, {"next": 700}, False, ({"next": 600},)))
    assert shell.driver.epochs_after_running() == 0, "the running job spends the budget"


def test_a_job_of_several_epochs_stays_within_the_epoch_budget() -> None:
    shell = Shell(epochs_per_job=4, max_epochs=7)
    shell.start()
    shell.run_data_epoch(100)
    decision = shell.step(
        InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400}))
    )
    decision = shell.succeed(decision.action.order.epoch)
    assert decision.action == PlanInput(2), "two epochs of the budget are left"


def test_every_barrier_cut_inside_a_job_reaches_the_hosts_after_it() -> None:
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.run_data_epoch(100)
    decision = shell.step(
        InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400}))
    )
    # Two checkpoints cut while the job ran; subtasks that finished first get them from the driver.
    events = (
        CheckpointTriggered(1, "checkpoint"),
        barrier(1, 3),
        CheckpointTriggered(2, "checkpoint"),
        barrier(2, 5),
    )
    decision = shell.succeed(decision.action.order.epoch, events)
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier == barrier(1, 3)
    decision = shell.step(BarrierDelivered(1))
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier == barrier(2, 5)
    decision = shell.step(BarrierDelivered(2))
    assert isinstance(decision.action, PlanInput)


def test_a_barrier_cut_before_a_job_began_goes_to_the_hosts_while_it_runs() -> None:
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.run_data_epoch(100)
    decision = shell.step(
        InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400}))
    )
    assert isinstance(decision.action, RunEpoch)
    # The coordinator cut at the newest final epoch (1) before any task began epoch 2.
    decision = shell.step(None, (CheckpointTriggered(1, "checkpoint"), barrier(1, 1)))
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier == barrier(1, 1)
    assert [o.final_epoch for o in decision.action.operators] == [1]
    decision = shell.step(BarrierDelivered(1))
    assert decision.action == AwaitJob(0.2)
    # A cut inside the job waits for its end; a failed delivery is left to the tasks.
    decision = shell.step(None, (CheckpointTriggered(2, "checkpoint"), barrier(2, 3)))
    assert decision.action == AwaitJob(0.2)
    decision = shell.succeed(5)
    assert isinstance(decision.action, DeliverBarrier) and decision.action.barrier == barrier(2, 3)
    decision = shell.step(BarrierDelivered(2))
    decision = shell.step(InputPlanned(True, {"next": 600}, False))
    assert isinstance(decision.action, RunEpoch)
    decision = shell.step(None, (CheckpointTriggered(3, "checkpoint"), barrier(3, 5)))
    assert isinstance(decision.action, DeliverBarrier)
    decision = shell.step(BarrierDelivered(3, StateLostError("the host of subtask 1 is gone")))
    assert any("the running job's tasks take it" in e.message for e in shell.of(Log))
    assert decision.action == AwaitJob(0.2)
    assert isinstance(shell.succeed(6).action, PlanInput)
    decision = shell.step(InputPlanned(True, {"next": 700}, False))
    assert decision.action.order.barrier is None, "the next job carries nothing"


def test_a_checkpoint_cut_inside_a_failed_job_publishes_and_is_restored() -> None:
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.run_data_epoch(100)
    shell.step(InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400})))
    events = (CheckpointTriggered(1, "checkpoint"), barrier(1, 3), completed(1, 3))
    decision = shell.step(EpochFailed(5, RuntimeError("Python worker exited unexpectedly")), events)
    assert Publish(3) in decision.effects, "the completed checkpoint's output is published first"
    assert isinstance(decision.action, Restore) and decision.action.path == "file:///ckpt/job/chk-1"


def test_while_a_job_runs_checkpoints_publish_and_aborted_ones_cancel_at_once() -> None:
    shell = Shell(epochs_per_job=4, deliver_barriers=True, in_job_cuts=True)
    shell.start()
    shell.run_data_epoch(100)
    decision = shell.step(
        InputPlanned(True, {"next": 500}, False, ({"next": 200}, {"next": 300}, {"next": 400}))
    )
    assert isinstance(decision.action, RunEpoch)
    decision = shell.step(None, (CheckpointTriggered(1, "checkpoint"), barrier(1, 3), completed(1, 3)))
    assert decision.action == AwaitJob(0.2)
    assert Publish(3) in decision.effects, "a checkpoint cut inside the job publishes before its end"
    decision = shell.step(
        None, (CheckpointTriggered(2, "checkpoint"), CheckpointAborted(2, "checkpoint", "expired"))
    )
    assert CancelUploads(2) in decision.effects and isinstance(decision.action, AwaitJob)
    # A failure the coordinator reports waits for the job's end; then the job restores.
    decision = shell.step(None, (JobFailed("too many failures", 3, 1),))
    assert isinstance(decision.action, AwaitJob)
    decision = shell.step(EpochSucceeded(5))
    assert isinstance(decision.action, Restore) and decision.action.path == "file:///ckpt/job/chk-1"
