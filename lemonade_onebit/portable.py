"""What differs between operating systems, kept here so the package imports on Windows too (SPEC:
Windows runs the cpu and onnx routes). Each system's own module (`fcntl`, `msvcrt`) is imported
where it is used, so this one imports everywhere."""

from __future__ import annotations

import errno
import os
import sys

F_SETPIPE_SZ = 1031  # fcntl: a pipe's capacity (Linux)
O_BINARY = getattr(os, "O_BINARY", 0)  # Windows opens files as text without it


def try_lock(handle) -> bool:
    """Lock an open file exclusively, without waiting; False when another process holds it. The
    lock ends when the file is closed, also when the process dies."""
    if sys.platform == "win32":
        import msvcrt

        handle.seek(0)  # every holder locks the same byte, whatever the file's length
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EDEADLOCK):
                return False
            raise
    else:
        import fcntl

        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def grow_pipe(fd: int, size: int) -> None:
    """Ask for a pipe of `size` bytes where the system allows it (Linux); the default capacity
    only means more calls."""
    if sys.platform.startswith("linux"):
        import fcntl

        try:
            fcntl.fcntl(fd, F_SETPIPE_SZ, size)
        except OSError:
            pass


def pwrite(fd: int, data, offset: int) -> int:
    """`os.pwrite`, which Windows lacks; there the file position moves (one writer per file)."""
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


def pread(fd: int, n: int, offset: int) -> bytes:
    """`os.pread`, which Windows lacks; there the file position moves (one reader per file)."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)
