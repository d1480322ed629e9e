"""One file from the hub into the Hugging Face cache, resumable across processes.

`huggingface_hub` resolves the URL, the token, the commit and the file's etag and size (a HEAD);
the transfer is ours, because the library discards a partial file when its process ends. The
partial file is `blobs/<etag>.incomplete` (the cache's own name for it), guarded by the cache's
lock file (`.locks/models--ORG--REPO/<etag>.lock`) so two pulls never write it at once; a later pull asks for the rest with `Range`. The sha256 is computed
while the bytes arrive, so checking a large file costs no second read.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import http.client
import os
import queue
import threading
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from lemonade_onebit.errors import RunError

BLOCK = 1 << 20
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


class Restart(Exception):
    """The server ignored the Range and sent the whole file: the partial file was emptied."""


def _open(url: str, headers: dict, auth: dict, timeout: float):
    """GET `url`, following redirects; the token goes only to the hub's own host."""
    hub_host = urlsplit(url).netloc
    for _ in range(6):
        parts = urlsplit(url)
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(parts.netloc, timeout=timeout)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target, headers={**headers, **(auth if parts.netloc == hub_host else {})})
        resp = conn.getresponse()
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            url = urljoin(url, resp.getheader("Location"))
            resp.read()
            conn.close()
            continue
        return conn, resp
    raise RunError(f"too many redirects for {url}")


def fetch(url: str, blob: Path, lock_path: Path, size: int, sha256: str | None, auth: dict,
          progress, timeout: float = 60) -> str | None:
    """Complete `blob` from `url`; returns the sha256 of the whole file (None when `sha256` is
    None and nothing asked for it). A cut connection is retried from where it stopped."""
    part = blob.with_name(blob.name + ".incomplete")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"another pull is downloading {blob.name}; wait for it") from None
        digest = Hasher() if sha256 else None
        with open(part, "ab+") as out:
            out.seek(0)
            if digest is not None:
                while block := out.read(BLOCK):
                    digest.update(block)
            have = out.seek(0, os.SEEK_END)
            progress.update(have)
            tries = 0
            while have < size:
                try:
                    have = _transfer(url, out, have, size, digest, auth, progress, timeout)
                except Restart:
                    if digest is not None:
                        digest.hexdigest()  # ends its thread
                    digest = Hasher() if sha256 else None
                    progress.update(-have)
                    have = 0
                except (OSError, http.client.HTTPException, Cut) as exc:
                    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                        raise RunError(f"disk full while writing {part}; the bytes so far are "
                                       f"kept: free some space and pull again to continue") from None
                    tries += 1
                    if tries > RETRIES:
                        raise RunError(f"{exc}; the {have} bytes so far are kept: pull again "
                                       f"to continue") from None
                    time.sleep(min(2 ** tries * 0.1, 2))
                    have = out.seek(0, os.SEEK_END)
            if have != size:
                raise RunError(f"{blob.name}: got {have} bytes, the hub says {size}")
            out.flush()
        os.replace(part, blob)
        return digest.hexdigest() if digest is not None else None
    finally:
        lock.close()


def _transfer(url, out, have: int, size: int, digest, auth, progress, timeout) -> int:
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    conn, resp = _open(url, headers, auth, timeout)
    try:
        if resp.status == 200 and have:  # the server ignored the Range: start again
            out.truncate(0)
            raise Restart()
        if resp.status not in (200, 206):
            raise RunError(f"{url} answered {resp.status} {resp.reason}")
        ring = [bytearray(BLOCK) for _ in range(RING)]
        turn = 0
        while have < size:
            block = ring[turn % RING]
            turn += 1
            n = resp.readinto(block)
            if not n:
                raise Cut(f"the connection closed at byte {have} of {size}")
            data = memoryview(block)[:n]
            out.write(data)
            if digest is not None:
                digest.update(data)
            have += n
            progress.update(n)
        return have
    finally:
        conn.close()
