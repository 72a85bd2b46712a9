"""Running a keyed function against state: the operator driver of ``weir.testing`` and the Spark worker.

One :class:`OperatorRunner` runs one user function for one operator
subtask against one state *session* (``weir._internal.Session``: the
batched state access of that subtask, in this process or in a state host).
It knows nothing about Spark, epochs or where the session's state lives.

The package is split by responsibility: ``keys`` (the current key and the
encoded keys of a batch), ``keyed_state`` (the batch hooks every keyed state
has; list and map state), ``value_state`` (the caches of value, reducing and
aggregating state), ``vectorized`` (state of vectorized functions),
``operator_state``, ``contexts`` (what the function's methods get) and
``runner``.

API (the caller owns epochs: ``session.begin(epoch, attempt, final_epoch)``
before and ``session.commit(epoch, attempt)`` after the calls of one epoch)::

    runner = OperatorRunner(function, session, restored=False)
    runner.open()                      # initialize_state (CheckpointedFunction), then open()
    out = runner.process(elements, keys, key_groups)   # one batch, KeyedProcessFunction
    out = runner.process_arrow(batch, keys, key_groups) # one batch, VectorizedKeyedFunction
    runner.snapshot_state(checkpoint_id, timestamp_ms)  # before the session's sync snapshot
    runner.notify_checkpoint_complete(checkpoint_id)    # CheckpointListener
    runner.close()                     # close(), then writes operator state to the session

* ``process(elements, keys, key_groups=None) -> list``: ``keys[i]`` is the key
  of ``elements[i]`` (what the key selector returned: int, str, bytes, bool,
  float or a tuple of those); ``key_groups[i]`` its key group (``None``: Weir
  computes Spark's ``pmod(hash(key), max_parallelism)``). Per batch, the
  value-like states (value, reducing, aggregating) of all distinct keys are
  fetched in one session call per state; each record runs against a plain
  dict cache with its key as the current key; dirty entries are written back
  in one call per state at the end of the batch. List and map states are
  fetched per key, lazily, on first use in the batch, and written back at the
  end. Returns the function's outputs in record order.
* ``process_arrow(batch, keys, key_groups=None) -> RecordBatch | None``: the
  vectorized path; the function reads and writes state with
  ``get_batch``/``put_batch``/``aggregate`` on Arrow arrays.
* ``snapshot_state`` calls the function's ``snapshot_state`` (a
  :class:`~weir.functions.CheckpointedFunction`) and writes its operator state
  into the session; call it inside an open epoch, before the snapshot is taken.
* ``close`` also writes operator state, so a runner created for the next task
  of the same subtask (on any worker) starts from it: a Spark worker creates a
  runner per task (``open`` ... ``close``) with ``restored=True`` whenever the
  subtask has state from a checkpoint or an earlier task.
* ``close`` and ``snapshot_state`` write to the session: call them inside the
  open epoch, before ``session.commit``. On Spark a function instance lives
  for one task, so a :class:`~weir.functions.CheckpointedFunction` that keeps
  data in memory and copies it into operator state in ``snapshot_state`` (as
  Flink's ``BufferingSink`` does) needs ``snapshot_state`` at the end of every
  task that may end at a checkpoint cut, before ``close``.
* A ``process``/``process_arrow`` call that raises writes nothing of its batch;
  the caller fails the task, and the retry's ``begin`` with a new attempt drops
  whatever earlier batches of the failed attempt wrote.
* Keys: an in-process session takes the key column types from the first key
  (int -> int64 as Spark's LongType, str, bytes, bool, float -> float64, tuple
  -> one column per element); a host session is attached with the key column
  types and converts keys to them (a Python int fits an int32 column). Keys
  of other types raise :class:`~weir.exceptions.StateError`.
* ``read_keyed_state(name, key, key_group)`` reads one key's state for tests.

State is only readable while a record is processed: outside (``open``,
``initialize_state``, ``snapshot_state``) a keyed state raises
:class:`~weir.exceptions.StateError`.
"""

from __future__ import annotations

from weir.runtime.runner import OperatorRunner

__all__ = ["OperatorRunner"]
