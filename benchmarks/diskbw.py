"""Sequential disk bandwidth of a directory's file system, measured in the same run as the
checkpoint benchmarks that compare against it (docs/benchmarks.md: async upload >= 70% of the
write bandwidth, restore >= 50% of the read bandwidth).

Write: ``size`` bytes in ``block``-sized writes, then ``fsync``; the time includes the fsync,
so it is the device's rate, not the page cache's. Read: after the fsync the file's pages are
dropped from the page cache with ``posix_fadvise(DONTNEED)`` (clean pages are dropped without
root), then the file is read sequentially.

    from benchmarks.diskbw import measure_disk_bandwidth
    bw = measure_disk_bandwidth("/tmp")        # ~1 GiB, a few seconds
    bw.write_mb_s, bw.read_mb_s

    .venv/bin/python benchmarks/diskbw.py [DIR] [--size-mib 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1024 * 1024


@dataclass(frozen=True)
class DiskBandwidth:
    """Result of one measurement; MB here means MiB (2**20 bytes)."""

    directory: str
    size_bytes: int
    write_s: float
    read_s: float
    #: False when the kernel kept the file cached despite the fadvise (the read rate is then
    #: the page cache's, an upper bound, not the disk's).
    read_uncached: bool

    @property
    def write_mb_s(self) -> float:
        """Sequential write bandwidth including fsync, MiB/s."""
        return self.size_bytes / MIB / self.write_s

    @property
    def read_mb_s(self) -> float:
        """Sequential read bandwidth, MiB/s."""
        return self.size_bytes / MIB / self.read_s

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form, the rates included."""
        return {**asdict(self), "write_mb_s": self.write_mb_s, "read_mb_s": self.read_mb_s}


def _resident_fraction(fd: int, size: int) -> float | None:
    """Fraction of the file's pages in the page cache (``mincore`` over a read-only mapping),
    or None where that cannot be measured."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(address, size, vec) != 0:
            return None
        return sum(b & 1 for b in vec) / pages
    finally:
        libc.munmap(address, size)


def measure_disk_bandwidth(
    directory: str | Path | None = None, size_bytes: int = 1024 * MIB, block_bytes: int = 8 * MIB
) -> DiskBandwidth:
    """Write then read ``size_bytes`` sequentially in a temporary file under ``directory``
    (default: the system temp dir), and return the timings. The file is removed afterwards."""
    block = os.urandom(block_bytes)  # incompressible, in case the file system compresses
    blocks, rest = divmod(size_bytes, block_bytes)
    with tempfile.TemporaryDirectory(prefix="weir-diskbw-", dir=directory) as tmp:
        path = Path(tmp) / "bandwidth.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            start = time.perf_counter()
            for _ in range(blocks):
                os.write(fd, block)
            if rest:
                os.write(fd, block[:rest])
            os.fsync(fd)
            write_s = time.perf_counter() - start
        finally:
            os.close(fd)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            resident = _resident_fraction(fd, size_bytes)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            start = time.perf_counter()
            while os.read(fd, block_bytes):
                pass
            read_s = time.perf_counter() - start
        finally:
            os.close(fd)
    return DiskBandwidth(
        directory=str(Path(directory or tempfile.gettempdir()).resolve()),
        size_bytes=size_bytes,
        write_s=write_s,
        read_s=read_s,
        read_uncached=resident is not None and resident < 0.05,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Sequential write (with fsync) and read bandwidth of a directory."
    )
    parser.add_argument("directory", nargs="?", default=None, help="default: the system temp dir")
    parser.add_argument("--size-mib", type=int, default=1024)
    args = parser.parse_args()
    result = measure_disk_bandwidth(args.directory, args.size_mib * MIB)
    print(json.dumps(result.as_dict(), indent=1))


if __name__ == "__main__":
    main()
