"""One file from the hub into the Hugging Face cache, resumable across processes.

`huggingface_hub` resolves the URL, the token, the commit and the file's etag and size (a HEAD);
the transfer is ours, because the library discards a partial file when its process ends. The
partial file is `blobs/<etag>.incomplete` (the cache's own name for it) and holds exactly the
bytes received, whatever ends the pull; it is guarded by the cache's lock file
(`.locks/models--ORG--REPO/<etag>.lock`) so two pulls never write it at once, and a later pull asks
for the rest with `Range`. The sha256 is computed on a second thread while the bytes arrive, so
checking a large file costs no second read.

Over plain HTTP on Linux (a mirror on the local network, `HF_ENDPOINT`) the kernel moves the bytes
from the socket into the file with `splice`, and the hasher reads them back through a read-only
map of the file's pages: no copy through this process. Elsewhere (HTTPS, other systems) they are
read into a ring of buffers and written from there.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import mmap
import os
import queue
import select
import ssl
import threading
import time
from pathlib import Path

from lemonade_onebit import httpclient
from lemonade_onebit.errors import RunError
from lemonade_onebit.portable import O_BINARY, grow_pipe, pread, pwrite, try_lock

BLOCK = 1 << 20  # bytes per hand-off to the hasher
QUEUE = 32  # blocks waiting to be hashed
RING = QUEUE + 3  # buffers reused in turn: never one still queued or being hashed
RETRIES = 5


class Hasher:
    """sha256 on a second thread, so hashing overlaps receiving (hashlib releases the GIL)."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            self._digest.update(data)

    def update(self, data) -> None:
        self._queue.put(data)

    def hexdigest(self) -> str:
        self._queue.put(None)
        self._thread.join()
        return self._digest.hexdigest()


class Cut(Exception):
    """The connection ended before the file did; the bytes so far are kept."""


def fetch(url: str, blob: Path, lock_path: Path, size: int, sha256: str | None, auth: dict,
          progress, timeout: float = 60) -> str | None:
    """Complete `blob` from `url`; returns the sha256 of the whole file (None when `sha256` is
    None and nothing asked for it). A cut connection is retried from where it stopped."""
    part = blob.with_name(blob.name + ".incomplete")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a")
    try:
        if not try_lock(lock):
            raise RunError(f"another pull is downloading {blob.name}; wait for it")
        fd = os.open(part, os.O_RDWR | os.O_CREAT | O_BINARY, 0o644)
        try:
            if os.fstat(fd).st_size > size:  # not the start of this file: begin again
                os.ftruncate(fd, 0)
            digest = _resume(fd, sha256)
            have = os.fstat(fd).st_size
            progress.update(have)
            tries = 0
            while have < size:
                try:
                    conn, resp = _get(url, have, auth, timeout)
                    try:
                        if resp.status == 200 and have:  # the Range was ignored: all again
                            if digest is not None:
                                digest.hexdigest()  # ends its thread, done with the old bytes
                                digest = Hasher()
                            progress.update(-have)
                            os.ftruncate(fd, 0)
                            have = 0
                        _receive(conn, resp, fd, have, size, digest, progress)
                    finally:
                        conn.close()
                except (OSError, http.client.HTTPException, Cut) as exc:
                    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise RunError(f"disk full while writing {part}; the bytes so far are "
                                       f"kept: free some space and pull again to continue") from None
                    tries += 1
                    if tries > RETRIES:
                        raise RunError(f"{exc}; the {os.fstat(fd).st_size} bytes so far are "
                                       f"kept: pull again to continue") from None
                    time.sleep(min(2 ** tries * 0.1, 2))
                have = os.fstat(fd).st_size
            if have != size:
                raise RunError(f"{blob.name}: got {have} bytes, the hub says {size}")
        finally:
            os.close(fd)
        # the hasher lets go of its maps of the file first: Windows renames no mapped file
        got = digest.hexdigest() if digest is not None else None
        os.replace(part, blob)
        return got
    finally:
        lock.close()


def _resume(fd: int, sha256: str | None) -> Hasher | None:
    """A hasher that has seen the bytes an earlier pull left (None when nothing is checked)."""
    if not sha256:
        return None
    digest = Hasher()
    kept = os.fstat(fd).st_size
    for at in range(0, kept, BLOCK):
        _hash_back(fd, at, min(at + BLOCK, kept), digest)
    return digest


def _get(url: str, have: int, auth: dict, timeout: float):
    """GET the file from byte `have` on; a server may answer 200 with all of it instead."""
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    conn, resp = httpclient.open_response("GET", url, headers=headers, auth=auth, timeout=timeout)
    if resp.status not in (200, 206):
        conn.close()
        raise RunError(f"{url} answered {resp.status} {resp.reason}")
    return conn, resp


def _receive(conn, resp, fd: int, have: int, size: int, digest: Hasher | None, progress) -> None:
    """The body of `resp` into `fd` from offset `have` until the file is `size` bytes."""
    if hasattr(os, "splice") and not isinstance(conn.sock, ssl.SSLSocket) and not resp.chunked:
        # what http.client already read past the headers, then the rest straight from the socket
        head = resp.fp.read1(min(BLOCK, size - have))
        if not head:
            raise Cut(f"the connection closed at byte {have} of {size}")
        have = _write(fd, head, have, digest, progress)
        try:
            return _splice(conn.sock, fd, have, size, digest, progress)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this file cannot be spliced into
                raise
        have = os.fstat(fd).st_size
    _copy(resp, fd, have, size, digest, progress)


def _write(fd: int, data, at: int, digest: Hasher | None, progress) -> int:
    """`data` into the file at `at`; the hasher and the bar get what was written, also when the
    write fails part way. Returns the offset after it."""
    done = 0
    try:
        while done < len(data):
            done += pwrite(fd, data[done:], at + done)
    finally:
        if digest is not None and done:
            digest.update(data[:done])
        progress.update(done)
    return at + done


def _copy(resp, fd: int, have: int, size: int, digest: Hasher | None, progress) -> None:
    ring: list[bytearray] = []  # grows to RING buffers, then they are reused in turn
    turn = 0
    while have < size:
        if turn < RING:
            ring.append(bytearray(min(BLOCK, size - have)))
        block = memoryview(ring[turn % RING])
        turn += 1
        n = resp.readinto(block[:size - have])
        if not n:
            raise Cut(f"the connection closed at byte {have} of {size}")
        have = _write(fd, block[:n], have, digest, progress)


def _splice(sock, fd: int, have: int, size: int, digest: Hasher | None, progress) -> None:
    """Socket to pipe to file in the kernel; the hasher reads each block back from the file's
    pages. Raises EINVAL, with nothing lost, where the file system cannot take spliced bytes."""
    timeout = sock.gettimeout()
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    r, w = os.pipe()
    hashed = have
    try:
        grow_pipe(w, BLOCK)
        while have < size:
            try:
                n = os.splice(sock.fileno(), w, min(BLOCK, size - have),
                              flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                if not poller.poll(None if timeout is None else timeout * 1000):
                    raise TimeoutError(f"no bytes for {timeout:g} s") from None
                continue
            if not n:
                raise Cut(f"the connection closed at byte {have} of {size}")
            try:
                while n:
                    moved = os.splice(r, fd, n, offset_dst=have, flags=os.SPLICE_F_MOVE)
                    have += moved
                    n -= moved
                    progress.update(moved)
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # write what the pipe holds before giving up
                    if digest is not None:
                        _hash_back(fd, hashed, have, digest)
                    hashed = have  # from here _write hashes what it writes, also on failure
                    hashed = have = _write(fd, _drain(r, n), have, digest, progress)
                raise
            if digest is not None and have - hashed >= BLOCK:
                _hash_back(fd, hashed, have, digest)
                hashed = have
    finally:
        os.close(r)
        os.close(w)
        if digest is not None:
            _hash_back(fd, hashed, have, digest)


def _drain(r: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        data += os.read(r, n - len(data))
    return data


def _hash_back(fd: int, start: int, end: int, digest: Hasher) -> None:
    """Hand bytes start..end of the file to the hasher, through a read-only map of its pages."""
    if end <= start:
        return
    base = start - start % mmap.ALLOCATIONGRANULARITY
    try:
        pages = memoryview(mmap.mmap(fd, end - base, offset=base, access=mmap.ACCESS_READ))
    except (OSError, ValueError):  # a file system that cannot map files
        digest.update(pread(fd, end - start, start))
        return
    digest.update(pages[start - base:])
