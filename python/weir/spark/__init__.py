"""Run Weir-stateful functions as PySpark jobs: ``StreamJob``, sources and sinks.

Example::

    from weir.spark import StreamJob, sinks, sources
    job = StreamJob(spark, name="avg", checkpoint_dir="file:///tmp/ckpt",
                    state_backend="rocksdb", parallelism=2, max_parallelism=128)
    job.enable_checkpointing(1000)
    events = job.from_source(sources.parquet_files("data/events"), uid="events")
    (events.key_by("key")
           .process(CountWindowAverage(), output_schema="key long, avg long", uid="avg")
           .sink_to(sinks.parquet_files("out/"), uid="out"))
    result = job.execute()
"""

from __future__ import annotations

from weir.spark import restart, sinks, sources
from weir.spark.api import DataStream, KeyedStream, StreamJob
from weir.spark.runner import EpochProgress, JobResult

__all__ = [
    "DataStream",
    "EpochProgress",
    "JobResult",
    "KeyedStream",
    "StreamJob",
    "restart",
    "sinks",
    "sources",
]
