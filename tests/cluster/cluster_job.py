"""The keyed-average job on ``local-cluster[2,1,1024]``: two executor JVMs,
one state host each, run by its own driver process.

``python cluster_job.py CONFIG.json`` runs the job CONFIG describes (see
:func:`main`) and prints ``RESULT {...}`` with the run's epochs and restarts.
The tests start it as a subprocess: a local-cluster session cannot share a
process with the local-mode session of the other Spark tests, and the driver
itself is one of the processes they kill.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
for entry in (str(HERE), str(EXAMPLES)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from keyed_average import KeyedAverage  # noqa: E402

from weir import RuntimeContext  # noqa: E402

MASTER = "local-cluster[2,1,1024]"


class TracedAverage(KeyedAverage):
    """The keyed average, appending ``subtask executor`` to ``trace`` in every
    task: the executor is the pid of the PySpark daemon that forked the worker,
    one per executor JVM."""

    def __init__(self, trace: str) -> None:
        super().__init__()
        self.trace = trace

    def open(self, runtime_context: RuntimeContext) -> None:
        super().open(runtime_context)
        line = f"{runtime_context.get_index_of_this_subtask()} {os.getppid()}\n"
        with open(self.trace, "a", encoding="utf-8") as trace:
            trace.write(line)


def session() -> Any:
    """A Spark session on two executor JVMs, everything on loopback."""
    from pyspark.sql import SparkSession

    # The executors' Python workers must run this interpreter, which has weir installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = os.pathsep.join([str(HERE), str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
    return (
        SparkSession.builder.master(MASTER)
        .appName("weir-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.executorEnv.PYTHONPATH", path)
        .config("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        # A replaced executor may be slow to register: do not give up on it.
        .config("spark.task.maxFailures", "8")
        .getOrCreate()
    )


def main(config_path: str) -> int:
    """Runs the job of the JSON config: ``name``, ``checkpoint_dir``, ``out``,
    ``trace``, ``n``, ``keys``, ``rows_per_epoch``, ``parallelism``,
    ``storage_options``, ``restore`` (``"latest"`` or absent), ``epochs_per_job``
    (absent: the default) and ``tls`` (the arguments of :class:`~weir.TlsFiles`, or
    absent)."""
    from weir import TlsFiles
    from weir.spark import StreamJob, restart, sinks, sources
    from weir.spark.api import DEFAULT_EPOCHS_PER_JOB

    config = json.loads(Path(config_path).read_text())
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    job = StreamJob(
        spark,
        name=config["name"],
        checkpoint_dir=config["checkpoint_dir"],
        parallelism=config["parallelism"],
        max_parallelism=128,
        checkpoint_storage_options=config.get("storage_options"),
        restore=config.get("restore"),
        # An executor lost mid-epoch can fail more than one attempt before Spark replaces it.
        restart_strategy=restart.fixed_delay(10, 1.0),
        tls=TlsFiles(**config["tls"]) if config.get("tls") else None,
        epochs_per_job=config.get("epochs_per_job", DEFAULT_EPOCHS_PER_JOB),
    )
    job.enable_checkpointing(300)
    events = job.from_source(
        sources.generator(config["n"], keys=config["keys"], rows_per_epoch=config["rows_per_epoch"]),
        uid="events",
    )
    events.key_by("key").process(
        TracedAverage(config["trace"]), output_schema="key long, avg long", uid="avg"
    ).sink_to(sinks.parquet_files(config["out"]), uid="out")
    result = job.execute()
    print(
        "RESULT "
        + json.dumps(
            {
                "epochs": result.epochs,
                "restarts": result.restarts,
                "remote_state_bytes": result.remote_state_bytes,
                # Barriers the driver handed to the hosts, and those tasks took.
                "driver_barriers": sum("barrier" in w.driver for w in result.waterfalls),
                "task_barriers": sum(int(w.tasks.get("barrier", [0, 0, 0])[2]) for w in result.waterfalls),
            }
        ),
        flush=True,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
