"""The supervisor owns the executor process: start, readiness, log capture, exit, stop."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonade_onebit.errors import RunError

if TYPE_CHECKING:
    import asyncio
from lemonade_onebit.serve.process import spawn, terminate

READY_POLL_S = 0.01
LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class ExecutorSpec:
    argv: list[str]
    env: dict[str, str]
    port: int
    readiness: str  # path polled until it answers 200


class Supervisor:
    """One executor child. State: loading → ready, or → failed with a reason."""

    def __init__(self, spec: ExecutorSpec, load_timeout: float) -> None:
        self.spec = spec
        self.load_timeout = load_timeout
        self.state = "loading"
        self.failure: str | None = None
        self.proc: subprocess.Popen | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._last_output = time.monotonic()
        self._exited = None  # an asyncio.Event, made when a loop is attached
        self.returncode: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._early_exit: int | None = None  # an exit seen before the event loop was attached
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def start(self) -> None:
        """Spawn the executor. No event loop is needed yet, so serve can start the executor
        first and set up its HTTP front while the model loads."""
        try:
            self.proc = spawn(self.spec.argv, self.spec.env)
        except OSError as exc:
            raise RunError(f"cannot start {self.spec.argv[0]}: {exc.strerror}") from exc
        threading.Thread(target=self._drain, daemon=True).start()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on the executor's exit is reported on `loop`. (asyncio is imported only
        here and below: serve starts the executor before paying for it.)"""
        import asyncio

        self._exited = asyncio.Event()
        self._nudge = asyncio.Event()
        with self._lock:
            self._loop = loop
            early = self._early_exit
        if early is not None:
            self._on_exit(early)

    def _drain(self) -> None:
        """Relay the child's output to stderr, keep its last lines, then report its exit."""
        assert self.proc is not None and self.proc.stdout is not None
        out = sys.stderr
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._tail.append(line)
            self._last_output = time.monotonic()
            if self.state == "loading" and self._loop is not None:
                # New output while loading ("server is listening", "model loaded"): poll now
                # rather than at the next tick.
                try:
                    self._loop.call_soon_threadsafe(self._nudge.set)
                except RuntimeError:
                    pass
            try:
                out.write(line + "\n")
                out.flush()
            except (OSError, ValueError):
                pass
        rc = self.proc.wait()
        with self._lock:
            loop = self._loop
            if loop is None:
                self._early_exit = rc
                return
        try:
            loop.call_soon_threadsafe(self._on_exit, rc)
        except RuntimeError:  # the loop is already closed: serve is exiting
            pass

    def _on_exit(self, rc: int) -> None:
        self.returncode = rc
        self._nudge.set()
        if self.state != "stopping":
            reason = f"{self.spec.argv[0]} exited with code {rc}"
            last = self.last_error_line()
            self.failure = f"{reason}: {last}" if last else reason
            self.state = "failed"
        self._exited.set()

    def last_error_line(self) -> str:
        """The child's most telling last line: one that says error/fail, else its last line."""
        lines = [l for l in self._tail if l.strip()]
        for line in reversed(lines):
            low = line.lower()
            if "error" in low or "fail" in low or "invalid" in low or "unable" in low:
                return line.strip()
        return lines[-1].strip() if lines else ""

    async def wait_ready(self, session) -> None:
        """Poll readiness; fail at once on exit, or when the child stalls past the load timeout."""
        import asyncio

        import aiohttp

        url = self.base_url + self.spec.readiness
        probe = aiohttp.ClientTimeout(total=2)
        while True:
            if self._exited.is_set():
                raise RunError(self.failure or "executor exited during load")
            try:
                async with session.get(url, timeout=probe) as resp:
                    await resp.read()
                    if resp.status == 200:
                        self.state = "ready"
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() - self._last_output > self.load_timeout:
                raise RunError(
                    f"{self.spec.argv[0]} made no progress for {self.load_timeout:g} s while loading"
                )
            if not self._nudge.is_set():
                try:
                    await asyncio.wait_for(self._nudge.wait(), READY_POLL_S)
                except asyncio.TimeoutError:
                    pass
            self._nudge.clear()

    async def stop(self) -> None:
        import asyncio

        if self.proc is None:
            return
        self.state = "stopping" if self.state != "failed" else self.state
        await asyncio.get_running_loop().run_in_executor(None, terminate, self.proc)
