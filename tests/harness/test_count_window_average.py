"""Flink's CountWindowAverage through the harness: outputs, snapshot/restore mid-stream, rescaling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from count_window_average import CountWindowAverage

from weir import Types, ValueStateDescriptor
from weir.testing import KeyedOperatorHarness

INPUT = [(1, 3), (1, 5), (1, 7), (1, 4), (1, 2)]
REPO = Path(__file__).resolve().parents[2]


def harness(parallelism: int, backend: str, restore_from: str | None = None) -> KeyedOperatorHarness:
    return KeyedOperatorHarness(
        CountWindowAverage(),
        key_selector=lambda v: v[0],
        parallelism=parallelism,
        max_parallelism=128,
        backend=backend,
        restore_from=restore_from,
    )


def test_outputs_match_flinks_example(backend: str) -> None:
    with harness(2, backend) as h:
        h.process_elements(INPUT)
        assert h.outputs() == [(1, 4), (1, 5)]
        # The fifth element waits for its window: (count, sum) = (1, 2).
        assert h.state(1, "average") == (1, 2)
        descriptor = ValueStateDescriptor("average", Types.TUPLE([Types.LONG(), Types.LONG()]))
        assert h.get_state(1, descriptor) == (1, 2)
        assert h.state(2, "average") is None


@pytest.mark.parametrize("split", [1, 2, 3, 4])
def test_snapshot_and_restore_mid_stream_gives_the_same_outputs(
    backend: str, tmp_path: Path, split: int
) -> None:
    with harness(2, backend) as h:
        h.process_elements(INPUT[:split])
        savepoint = h.snapshot(tmp_path)
        first = h.outputs()
    with harness(2, backend, restore_from=savepoint) as restored:
        restored.process_elements(INPUT[split:])
        assert first + restored.outputs() == [(1, 4), (1, 5)]


@pytest.mark.parametrize("restore_backend", ["heap", "rocksdb"])
def test_rescale_two_to_three_keeps_every_key(backend: str, restore_backend: str, tmp_path: Path) -> None:
    keys = range(40)
    with harness(2, backend) as h:
        h.process_elements([(k, 10 * k) for k in keys])  # one element per key: all windows open
        assert h.outputs() == []
        savepoint = h.snapshot(tmp_path)
    with harness(3, restore_backend, restore_from=savepoint) as h3:
        for k in keys:
            assert h3.state(k, "average") == (1, 10 * k)
        h3.process_elements([(k, 2) for k in keys])
        assert sorted(h3.outputs()) == [(k, (10 * k + 2) // 2) for k in keys]
        assert all(h3.state(k, "average") is None for k in keys)


def test_example_input_across_a_rescale(backend: str, tmp_path: Path) -> None:
    with harness(2, backend) as h:
        h.process_elements(INPUT[:3])
        savepoint = h.snapshot(tmp_path)
        outputs = h.outputs()
    with harness(3, "rocksdb" if backend == "heap" else "heap", restore_from=savepoint) as h3:
        h3.process_elements(INPUT[3:])
        assert outputs + h3.outputs() == [(1, 4), (1, 5)]


def weir_cli() -> list[str]:
    """The ``weir`` command the package installed next to this interpreter."""
    return [str(Path(sys.executable).with_name("weir"))]


def test_the_snapshot_is_a_savepoint_the_cli_reads(backend: str, tmp_path: Path) -> None:
    command = weir_cli()
    with harness(2, backend) as h:
        h.process_elements(INPUT)
        savepoint = h.snapshot(tmp_path / "savepoints")
    info = subprocess.run(
        [*command, "savepoint", "info", savepoint],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert info.returncode == 0, info.stderr
    assert "harness-operator" in info.stdout
    verify = subprocess.run(
        [*command, "savepoint", "verify", savepoint],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert verify.returncode == 0, verify.stderr + verify.stdout
