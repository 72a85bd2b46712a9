"""A seeded randomized fault campaign: every run injects random faults and must publish
exactly the expected output, with no duplicates.

Faults: a task failure, a failure before the first checkpoint completed, a failure
right after a savepoint completed, a state host killed with SIGKILL, a Python worker
killed with SIGKILL, and the driver killed with SIGKILL (then restarted with
``restore="latest"``). Each run draws its backend, parallelism, checkpoint interval,
epochs per Spark job (checkpoints then cut inside running jobs too), source and one or
two faults from ``random.Random(seed)``. The source is the generator
with a fixed epoch size, or Parquet files read in epochs sized by time (the file
sources' default: epochs grow from one file towards the job's epoch target, so a
restore resumes from a stored position into epochs of other sizes).

``WEIR_FAULT_RUNS`` (default 20) sets the number of runs and ``WEIR_FAULT_SEED`` the
base seed; a failing run prints its seed and plan, so it can be replayed alone.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from keyed_average import FailingOnce, KeyedAverage
from keyed_jobs import (
    assert_nothing_left_behind,
    children_of,
    expected_pairs,
    processes,
    published,
    state_host_pids,
    write_event_files,
)

from weir.config import StateBackend
from weir.spark import EpochProgress, StreamJob, restart, sinks, sources

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

RUNS = int(os.environ.get("WEIR_FAULT_RUNS", "20"))
SEED = int(os.environ.get("WEIR_FAULT_SEED", "20261123"))
N = 20_000
KEYS = 2_000
EXPECTED = expected_pairs(N, KEYS)
FILES, ROWS_PER_FILE = 40, 500
"""The file source's input: ``N`` events in files of 500 rows."""
FILE_EPOCHS = 4
"""Faults of a run over files are armed after epoch 1 or 2 (driver kills: 2): with an
epoch target of 0.5-1 s its epochs grow from one file to a dozen, 4 to 20 epochs in all."""

IN_PROCESS_FAULTS = ("task", "before-first-checkpoint", "after-savepoint", "host-kill", "worker-kill")
KINDS = (*IN_PROCESS_FAULTS, "driver-kill")
"""Run ``i``'s first fault is ``KINDS[i % len(KINDS)]``: every kind comes up in a campaign."""


@dataclass(frozen=True)
class Plan:
    """What one run does."""

    seed: int
    backend: str
    """``heap``, ``rocksdb``, or ``rocksdb-incremental`` (incremental checkpoints)."""
    parallelism: int
    interval_ms: int
    rows_per_epoch: int | None
    """The generator's fixed epoch size; ``None``: Parquet files, epochs sized by time."""
    epoch_target_ms: int
    epochs_per_job: int
    faults: tuple[tuple[str, int], ...]
    """``(fault, epoch after which it is armed)``."""
    driver_kill: int | None
    """Kill the driver after this epoch (the run then happens in a subprocess)."""

    @staticmethod
    def draw(seed: int, first: str) -> Plan:
        rng = random.Random(seed)
        rows = rng.choice([2_000, 2_500, 4_000, None])
        per_job = rng.choice([1, 2, 4])
        epochs = FILE_EPOCHS if rows is None else N // rows
        kinds = [first, *(rng.choice(IN_PROCESS_FAULTS) for _ in range(rng.randint(0, 1)))]
        # A fault is armed after a Spark job and strikes in the next: leave one to come.
        last_armed = max(1, epochs - per_job - 1)
        faults = tuple(sorted((kind, rng.randint(1, last_armed)) for kind in kinds if kind != "driver-kill"))
        return Plan(
            seed=seed,
            backend=rng.choice(["heap", "rocksdb", "rocksdb-incremental"]),
            parallelism=rng.choice([1, 2, 3]),
            interval_ms=rng.choice([100, 300, 1_000]),
            rows_per_epoch=rows,
            epoch_target_ms=rng.choice([500, 1_000]),
            epochs_per_job=per_job,
            faults=faults,
            driver_kill=rng.randint(2, max(2, epochs - 2)) if first == "driver-kill" else None,
        )


class Faults:
    """Arms a run's faults from ``on_epoch`` and records what happened."""

    def __init__(self, plan: Plan, job: StreamJob, tmp: Path, name: str) -> None:
        self.plan, self.job, self.tmp, self.name = plan, job, tmp, name
        self.arm = _arm(tmp)
        self.happened: list[str] = []
        self.waiting = list(plan.faults)

    def on_epoch(self, progress: EpochProgress) -> None:
        # Each fault comes once, after the first Spark job that ran an epoch numbered at
        # least its epoch: a restore can skip numbers (epochs begun by a failed attempt are
        # not reused).
        due = [(fault, epoch) for fault, epoch in self.waiting if progress.epoch >= epoch]
        for fault, epoch in due:
            self.waiting.remove((fault, epoch))
            if fault == "task" or fault == "before-first-checkpoint" and not progress.checkpoints:
                self.arm.touch()
            elif fault == "after-savepoint":
                future = self.job.trigger_savepoint()
                future.add_done_callback(lambda f: self.arm.touch() if f.exception() is None else None)
            elif fault == "host-kill":
                for pid in state_host_pids(self.name):
                    os.kill(pid, signal.SIGKILL)
                    self.happened.append(f"host {pid}")
            elif fault == "worker-kill":
                threading.Thread(target=self._kill_a_worker, daemon=True).start()

    def _kill_a_worker(self) -> None:
        """Kills one Python worker while the next epoch runs (if one is running by then)."""
        time.sleep(0.2)
        for pid in _python_workers():
            os.kill(pid, signal.SIGKILL)
            self.happened.append(f"worker {pid}")
            return


def _arm(tmp: Path) -> Path:
    """The file whose existence arms the run's task failure."""
    return tmp / "armed"


def _failing(plan: Plan, tmp: Path) -> FailingOnce:
    """The keyed average, failing one task once after the arm file appears (part-way
    through a task's records: a one-file epoch gives a task of three 170 or so)."""
    after = 300 if plan.rows_per_epoch is not None else 100
    return FailingOnce(KeyedAverage(), str(tmp / "failed"), after=after, armed_by=str(_arm(tmp)))


def _python_workers() -> list[int]:
    """PySpark's Python worker processes (children of its daemon)."""
    return sorted(children_of(set(processes("pyspark.daemon"))))


def _job(spark: SparkSession, plan: Plan, tmp: Path, name: str, function: Any, **options: Any) -> StreamJob:
    job = StreamJob(
        spark,
        name=name,
        checkpoint_dir=str(tmp / "ckpt"),
        state_backend=StateBackend("rocksdb", incremental=True)
        if plan.backend == "rocksdb-incremental"
        else plan.backend,
        parallelism=plan.parallelism,
        savepoint_dir=str(tmp / "savepoints"),
        restart_strategy=restart.fixed_delay(10, 0.1),
        progress=False,
        epochs_per_job=plan.epochs_per_job,
        **options,
    )
    job.enable_checkpointing(plan.interval_ms)
    job.epoch_target_ms = plan.epoch_target_ms
    source = (
        sources.parquet_files(str(tmp / "files"), schema="key long, value long")
        if plan.rows_per_epoch is None
        else sources.generator(N, keys=KEYS, rows_per_epoch=plan.rows_per_epoch)
    )
    keyed = job.from_source(source, uid="events").key_by("key")
    averages = keyed.process(function, "key long, avg long", uid="avg")
    averages.sink_to(sinks.parquet_files(str(tmp / "out")), uid="out")
    return job


DRIVER = textwrap.dedent(
    """
    import os, sys
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, {examples!r})
    sys.path.insert(0, {tests!r})
    from pyspark.sql import SparkSession
    from test_fault_campaign import Plan, _job
    from keyed_average import KeyedAverage
    spark = (SparkSession.builder.master("local[2]").appName("weir-fault-driver")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    from pathlib import Path
    plan = Plan.draw({seed}, "driver-kill")
    progress = Path({progress!r})
    job = _job(spark, plan, Path({tmp!r}), "campaign", KeyedAverage(), restore="latest")
    job.execute(on_epoch=lambda p: progress.write_text(str(p.epochs)))
    print("DRIVER-DONE", flush=True)
    """
)


def _epochs_done(progress: Path) -> int:
    """What the driver last wrote to ``progress`` (0 before it wrote a whole number)."""
    try:
        return int(progress.read_text())
    except (OSError, ValueError):
        return 0


def _kill_the_driver_then_restart(plan: Plan, tmp: Path) -> None:
    """Runs the job in a driver process, kills it after ``plan.driver_kill`` epochs,
    and runs it to its end with ``restore="latest"`` (a run that kills its driver
    injects no other fault)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    progress = tmp / "progress"
    script = tmp / "driver.py"
    script.write_text(
        DRIVER.format(
            examples=str(examples),
            tests=str(Path(__file__).parent),
            seed=plan.seed,
            progress=str(progress),
            tmp=str(tmp),
        )
    )
    first = subprocess.Popen([sys.executable, str(script)], start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None:
        if (
            progress.exists()
            and progress.read_text()
            and int(progress.read_text()) >= (plan.driver_kill or 0)
        ):
            break
        time.sleep(0.05)
    if first.poll() is None:
        os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    second = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=280, check=False
    )
    assert second.returncode == 0 and "DRIVER-DONE" in second.stdout, second.stderr[-3000:]


@pytest.mark.parametrize("run", range(RUNS))
def test_random_faults_keep_the_output_exact(spark: SparkSession, tmp_path: Path, run: int) -> None:
    plan = Plan.draw(SEED + run, KINDS[run % len(KINDS)])
    print(f"{plan} (replay: WEIR_FAULT_SEED={SEED + run - run % len(KINDS)} with run {run % len(KINDS)})")
    if plan.rows_per_epoch is None:
        write_event_files(tmp_path / "files", FILES, ROWS_PER_FILE, keys=KEYS)
    if plan.driver_kill is not None:
        _kill_the_driver_then_restart(plan, tmp_path)
    else:
        name = f"campaign-{run}"
        job = _job(spark, plan, tmp_path, name, _failing(plan, tmp_path))
        job.execute(on_epoch=Faults(plan, job, tmp_path, name).on_epoch)
    if any(kind == "task" for kind, _ in plan.faults):
        assert (tmp_path / "failed").exists(), f"{plan}: the task failure was never injected"
    got = published(spark, tmp_path / "out")
    assert sum(got.values()) == sum(EXPECTED.values()), f"{plan}: count"
    assert got == EXPECTED, f"{plan}: duplicated or missing averages"
    assert_nothing_left_behind(tmp_path / "out", tmp_path / "ckpt", tmp_path / "savepoints")
