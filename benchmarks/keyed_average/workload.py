"""The keyed-average workload: deterministic events, the Parquet files every variant reads,
and the expected output computed with a plain Python loop.

Events i = 0 .. N-1 have ``key = (i * 2654435761) mod K`` and ``value = i mod 1000``. Per key a
value state (count, sum) is updated on every event; when ``count == W`` the job emits
``(key, sum // count)`` and clears the state. The checksum is the sum of all emitted averages.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KEY_MULTIPLIER = 2654435761
VALUE_MODULUS = 1000

#: Arrow / Spark schema of an event. Both columns are int64 ("long" in Spark DDL).
EVENT_SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.int64())])
EVENT_DDL = "key long, value long"
#: Schema of an emitted average.
OUTPUT_DDL = "key long, avg long"


@dataclass(frozen=True)
class Params:
    """Size of one run: N events over K keys, a window of W events per emitted average."""

    n: int = 2_000_000
    k: int = 100_000
    w: int = 10
    #: The events are split into this many Parquet files, written in event order; streaming
    #: peers read ``files_per_trigger`` of them per micro-batch (one Spark checkpoint each),
    #: Weir jobs as many per epoch. Spark's Python state APIs pay per (key, micro-batch) call,
    #: ~1 ms each here, so the default is two micro-batches of N/2 events: far fewer Spark
    #: checkpoints than Weir's one per second, which flatters the peers, never Weir.
    files: int = 20
    files_per_trigger: int = 10

    def order_independent(self) -> bool:
        """True when the checksum does not depend on the order of one key's events.

        When K is a multiple of 1000 every event of a key has the same value
        (``i ≡ i0 mod K`` implies ``i ≡ i0 mod 1000``), so any reordering within a key gives the
        same averages. Otherwise a system that reorders a key's events within a micro-batch can
        legitimately produce a different checksum.
        """
        return self.k % VALUE_MODULUS == 0


@dataclass(frozen=True)
class Expectation:
    """What a correct run emits."""

    count: int
    checksum: int
    #: Sum of all input values; the identity ceiling passes events through unchanged.
    value_sum: int


def expected_output(p: Params) -> Expectation:
    """Run the workload as a plain Python loop over the events (the reference semantics)."""
    state: dict[int, tuple[int, int]] = {}
    count = 0
    checksum = 0
    value_sum = 0
    for i in range(p.n):
        key = (i * KEY_MULTIPLIER) % p.k
        value = i % VALUE_MODULUS
        value_sum += value
        c, s = state.get(key, (0, 0))
        c += 1
        s += value
        if c == p.w:
            count += 1
            checksum += s // c
            del state[key]
        else:
            state[key] = (c, s)
    return Expectation(count=count, checksum=checksum, value_sum=value_sum)


def event_table(start: int, stop: int, k: int) -> pa.Table:
    """Events ``start .. stop-1`` as an Arrow table (vectorized; same values as the loop)."""
    i = np.arange(start, stop, dtype=np.int64)
    # i * 2654435761 stays below 2**63 for i < 3.4e9, far beyond any benchmark size.
    keys = (i * np.int64(KEY_MULTIPLIER)) % np.int64(k)
    values = i % np.int64(VALUE_MODULUS)
    return pa.Table.from_arrays([pa.array(keys), pa.array(values)], schema=EVENT_SCHEMA)


def generate(p: Params, directory: Path) -> Path:
    """Write the events as ``p.files`` Parquet files under ``directory/events`` (once per run).

    Files are named and time-stamped in event order, so Spark's file source (which orders new
    files by modification time) feeds them in event order, one micro-batch after another.
    A ``params.json`` beside them lets a later call reuse identical data.
    """
    events = directory / "events"
    marker = directory / "params.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(p):
        return events
    events.mkdir(parents=True, exist_ok=True)
    for old in events.glob("*.parquet"):
        old.unlink()
    bounds = np.linspace(0, p.n, p.files + 1, dtype=np.int64)
    base_mtime = 1_700_000_000
    for f in range(p.files):
        path = events / f"part-{f:05d}.parquet"
        pq.write_table(event_table(int(bounds[f]), int(bounds[f + 1]), p.k), path)
        os.utime(path, (base_mtime + f, base_mtime + f))
    marker.write_text(json.dumps(asdict(p)))
    return events
