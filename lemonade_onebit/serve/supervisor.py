"""One executor process: spawn, output relay, readiness, exit, signals.

The state has one writer, `_on`, which moves it along `TRANSITIONS` under the lock and publishes
an immutable `Status`; readers (the HTTP front, any thread) take that snapshot without locking.
Exit is seen by a thread blocked in `wait()`, apart from the thread that relays the output: an
executor whose grandchild keeps the pipe open is still seen to exit, and its last lines are
waited for at most `DRAIN_GRACE_S`. Starting and stopping are the pool's (`serve/pool.py`).
"""

from __future__ import annotations

import collections
import enum
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonade_onebit.console import line as write_line
from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.process import signal_group, spawn

if TYPE_CHECKING:
    import asyncio

READY_POLL_S = 0.01
LOG_TAIL_LINES = 20
DRAIN_GRACE_S = 0.5  # after exit, how long the last output may take (llama-swap waits the same way)


class State(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"


# (state, event) -> next state; an event with no entry leaves the state as it is.
TRANSITIONS = {
    (State.LOADING, "ready"): State.READY,
    (State.LOADING, "fail"): State.FAILED,
    (State.READY, "fail"): State.FAILED,
    (State.LOADING, "stop"): State.STOPPING,
    (State.READY, "stop"): State.STOPPING,
    (State.LOADING, "exit"): State.FAILED,
    (State.READY, "exit"): State.FAILED,
    (State.STOPPING, "exit"): State.STOPPED,
}


@dataclass(frozen=True)
class Status:
    state: State
    failure: str | None = None  # why, when FAILED


@dataclass(frozen=True)
class ExecutorSpec:
    argv: list[str]
    env: dict[str, str]
    port: int
    readiness: str  # path polled until it answers 200


class Supervisor:
    """One executor child: loading → ready, or → failed with a reason; stopping → stopped."""

    def __init__(self, spec: ExecutorSpec, load_timeout: float) -> None:
        self.spec = spec
        self.load_timeout = load_timeout
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self._status = Status(State.LOADING)
        self._lock = threading.Lock()
        self._gone = threading.Event()  # the process has exited (or never started)
        self._drained = threading.Event()
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._last_output = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nudge: asyncio.Event | None = None  # made when a loop is attached

    @property
    def status(self) -> Status:
        return self._status

    @property
    def failure(self) -> str | None:
        return self._status.failure

    @property
    def exited(self) -> bool:
        return self._gone.is_set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def _on(self, event: str, failure: str | None = None) -> bool:
        """The one place the state changes; True when `event` moved it."""
        with self._lock:
            to = TRANSITIONS.get((self._status.state, event))
            if to is not None:
                self._status = Status(to, failure if to is State.FAILED else None)
        if to is not None:
            self._wake()
        return to is not None

    def start(self) -> None:
        """Spawn the executor. No event loop is needed yet, so serve can start the executor
        first and set up its HTTP front while the model loads."""
        try:
            self.proc = spawn(self.spec.argv, self.spec.env)
        except OSError as exc:
            reason = f"cannot start {self.spec.argv[0]}: {exc.strerror}"
            self._on("fail", reason)
            self._gone.set()
            raise RunError(reason) from exc
        threading.Thread(target=self._drain, name="executor-output", daemon=True).start()
        threading.Thread(target=self._wait_exit, name="executor-exit", daemon=True).start()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on changes are reported on `loop`. (asyncio is imported only here: serve
        starts the executor before paying for it.)"""
        import asyncio

        self._nudge = asyncio.Event()
        with self._lock:
            self._loop = loop

    def _wake(self) -> None:
        loop, nudge = self._loop, self._nudge
        if loop is None or nudge is None:
            return
        try:
            loop.call_soon_threadsafe(nudge.set)
        except RuntimeError:  # the loop is already closed: serve is exiting
            pass

    def _drain(self) -> None:
        """Relay the child's output to stderr and keep its last lines; nothing else."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._tail.append(line)
                self._last_output = time.monotonic()
                if self._status.state is State.LOADING:
                    # New output while loading ("server is listening", "model loaded"): poll
                    # now rather than at the next tick.
                    self._wake()
                write_line(line)  # whole lines only: serve's own lines share this stderr
        finally:
            self._drained.set()

    def _wait_exit(self) -> None:
        assert self.proc is not None
        rc = self.proc.wait()
        signal_group(self.proc.pid, signal.SIGKILL)  # what it left in its group goes with it
        if self._status.state is not State.STOPPING:
            self._drained.wait(DRAIN_GRACE_S)  # its last lines say why it exited
        self.returncode = rc
        reason = f"{self.spec.argv[0]} exited with code {rc}"
        last = self.last_error_line()
        self._on("exit", f"{reason}: {last}" if last else reason)
        self._gone.set()
        self._wake()

    def last_error_line(self) -> str:
        """The child's most telling last line: one that says error/fail, else its last line."""
        lines = [line for line in list(self._tail) if line.strip()]
        for line in reversed(lines):
            low = line.lower()
            if "error" in low or "fail" in low or "invalid" in low or "unable" in low:
                return line.strip()
        return lines[-1].strip() if lines else ""

    async def wait_ready(self, session) -> None:
        """Poll readiness; fail at once on exit, or when the child stalls past the load timeout."""
        import asyncio

        import aiohttp

        nudge = self._nudge
        assert nudge is not None, "attach() a loop first"
        url = self.base_url + self.spec.readiness
        probe = aiohttp.ClientTimeout(total=2)
        while True:
            status = self._status
            if status.state is State.READY:
                return
            if status.state is not State.LOADING:
                raise RunError(status.failure or f"{self.spec.argv[0]} was stopped while loading")
            try:
                async with session.get(url, timeout=probe) as resp:
                    await resp.read()
                    if resp.status == 200 and self._on("ready"):
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() - self._last_output > self.load_timeout:
                reason = (f"{self.spec.argv[0]} made no progress for {self.load_timeout:g} s "
                          "while loading")
                if self._on("fail", reason):
                    raise RunError(reason)
                continue
            if not nudge.is_set():
                try:
                    await asyncio.wait_for(nudge.wait(), READY_POLL_S)
                except asyncio.TimeoutError:
                    pass
            nudge.clear()

    def terminate(self) -> None:
        """Ask the executor's group to stop (SIGTERM); the pool decides when to kill."""
        self._on("stop")
        if self.proc is not None and not self.exited:
            signal_group(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and not self.exited:
            signal_group(self.proc.pid, signal.SIGKILL)

    def wait_gone(self, timeout: float) -> bool:
        """Block until the process has exited, at most `timeout` seconds."""
        return self._gone.wait(timeout)
