"""The executor pool: the one owner of every executor serve runs.

It starts them (the primary at once, another device's the first time it is asked for), waits for
their readiness, restarts the ones that die, and stops them all at once: SIGTERM to every process
group, one shared `STOP_GRACE_S` deadline, then SIGKILL, all within the 5 s after which Lemonade
SIGKILLs serve.

Each device has one record: starting, ready, restarting, or unusable with the reason. Restart
policy (as llama-swap and Ollama do it): an executor that dies once it was ready (the OOM killer,
a crash) is logged with its cause and started again after a back-off of `BACKOFF_S`, doubled at
each death up to `BACKOFF_CAP_S`; a restart that cannot load counts as a death too. After
`MAX_DEATHS` deaths with no `STABLE_S` of readiness between them the device is unusable for
good: for the primary, serve then exits 1 so that its owner (Lemonade, a service manager)
restarts it; a Laya backend's conversations go to the fallback. A device whose first start
failed is never started again.

asyncio is imported inside the methods that need it: the primary is spawned before it is.
"""

from __future__ import annotations

import enum
import functools
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.backend import Backend
from lemonade_onebit.serve.metrics import ServeMetrics
from lemonade_onebit.serve.plan import log
from lemonade_onebit.serve.supervisor import ExecutorSpec, State, Supervisor

if TYPE_CHECKING:
    import asyncio

    from lemonade_onebit.config import ServeConfig
    from lemonade_onebit.serve.plan import Plan

STOP_GRACE_S = 4.0  # serve's whole stop stays under Lemonade's 5 s
KILL_WAIT_S = 0.5
BACKOFF_S = 0.5
BACKOFF_CAP_S = 30.0
MAX_DEATHS = 5
STABLE_S = 60.0  # this long ready, and the deaths before are forgiven


class Unusable(RunError):
    """A device that cannot serve here; its reason is the message."""


class DeviceState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    UNUSABLE = "unusable"


@dataclass
class DeviceRecord:
    device: str
    state: DeviceState = DeviceState.STARTING
    backend: Backend | None = None  # set once its executor is spawned
    reason: str | None = None  # why it is unusable, or why it is restarting
    start: asyncio.Task | None = None  # a start or restart in progress (plan, spawn, load)
    deaths: int = 0  # deaths since it last stayed ready for STABLE_S
    ready_since: float | None = None


async def off_loop(fn, *args):
    """`fn(*args)` on a daemon thread, awaited: the loop keeps answering (`/health`) meanwhile,
    and serve's exit never waits for it (asyncio's own thread pool is joined at exit, and a
    `vulkaninfo` may take 10 s)."""
    import asyncio

    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(result, error) -> None:
        if not done.done():
            if error is None:
                done.set_result(result)
            else:
                done.set_exception(error)

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=work, name="serve-off-loop", daemon=True).start()
    return await done


def stop_all(supervisors: list[Supervisor], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every executor's group at once, wait for all of them under one deadline, then
    SIGKILL the ones left. Blocking: the pool runs it off the loop."""
    for sup in supervisors:
        sup.terminate()
    deadline = time.monotonic() + grace
    for sup in supervisors:
        sup.wait_gone(max(0.0, deadline - time.monotonic()))
    late = [sup for sup in supervisors if not sup.exited]
    for sup in late:
        sup.kill()
    for sup in late:
        sup.wait_gone(KILL_WAIT_S)


def backoff(deaths: int) -> float:
    """Seconds before the restart that follows death number `deaths` (1, 2, ...)."""
    return min(BACKOFF_S * 2 ** (deaths - 1), BACKOFF_CAP_S)


class ExecutorPool:
    def __init__(self, load_timeout: float, say=log) -> None:
        self.load_timeout = load_timeout
        self.say = say
        self.metrics = ServeMetrics()  # deaths, restarts and load times are recorded here
        self._primary: Backend | None = None
        self._records: dict[str, DeviceRecord] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session = None
        self._closing = False
        self.closed: asyncio.Future | None = None  # resolved when serve starts to stop
        self.gave_up: asyncio.Future | None = None  # the primary's reason, once it is unusable

    def launch(self, p: Plan) -> Backend:
        """Spawn the plan's executor now, on the calling thread (the kernel kills the executor
        when that thread ends, so it must be the main thread, which the loop runs on)."""
        device = p.launcher.info.device
        record = self._records.setdefault(device, DeviceRecord(device))
        record.backend = Backend(device, p.launcher, self._supervisor(record, p.spec),
                                 p.upstream_key, p.upstream_model)
        if self._primary is None:
            self._primary = record.backend
        record.backend.supervisor.start()
        return record.backend

    def _supervisor(self, record: DeviceRecord, spec: ExecutorSpec) -> Supervisor:
        supervisor = Supervisor(spec, self.load_timeout)
        if self._loop is not None:
            supervisor.attach(self._loop, functools.partial(self._exited, record))
        return supervisor

    @property
    def primary(self) -> Backend:
        """The first backend launched, serve's own model: `/health` and `/v1/models` are its."""
        if self._primary is None:
            raise RuntimeError("no executor launched yet")
        return self._primary

    @property
    def closing(self) -> bool:
        """Serve is stopping: nothing starts any more, and requests are turned away."""
        return self._closing

    def attach(self, loop: asyncio.AbstractEventLoop, session) -> None:
        """The loop changes are reported on, and the HTTP session readiness is polled with."""
        self._loop, self._session = loop, session
        self.closed, self.gave_up = loop.create_future(), loop.create_future()
        for record in self._records.values():
            if record.backend is not None:
                record.backend.supervisor.attach(loop, functools.partial(self._exited, record))

    async def load(self, backend: Backend) -> None:
        """Wait until a launched backend is ready; RunError with the executor's reason if not."""
        record = self._records[backend.device]
        try:
            await backend.supervisor.wait_ready(self._session)
        except RunError as exc:
            record.state, record.reason = DeviceState.UNUSABLE, str(exc)
            raise
        self._ready(record)

    def _ready(self, record: DeviceRecord) -> None:
        record.state, record.ready_since = DeviceState.READY, time.monotonic()
        record.reason = None
        started = record.backend.supervisor.started_at if record.backend else None
        if started is not None:
            self.metrics.load_seconds.set(record.device, value=record.ready_since - started)

    def state(self, device: str) -> DeviceState | None:
        record = self._records.get(device)
        return record.state if record is not None else None

    def states(self) -> dict[str, str]:
        """Each device the pool has a record of, and its state: what `/health` reports."""
        return {device: record.state.value for device, record in self._records.items()}

    def ready_backends(self) -> list[Backend]:
        """The backends whose executor serves now."""
        return [r.backend for r in self._records.values() if r.backend is not None
                and r.state is DeviceState.READY and r.backend.status.state is State.READY]

    def reason(self, device: str) -> str | None:
        """Why `device` is unusable or restarting, or None."""
        record = self._records.get(device)
        return record.reason if record is not None else None

    def unusable(self) -> frozenset[str]:
        return frozenset(d for d, r in self._records.items() if r.state is DeviceState.UNUSABLE)

    def is_ready(self, device: str) -> bool:
        return self.state(device) is DeviceState.READY

    async def settle(self, backend: Backend) -> None:
        """Wait while `backend` restarts, at most `load_timeout` seconds; a caller that leaves
        does not stop the restart."""
        import asyncio

        record = self._records[backend.device]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.load_timeout
        while record.state is DeviceState.RESTARTING and not self._closing:
            left = deadline - loop.time()
            if record.start is None or left <= 0:
                return
            await asyncio.wait({record.start}, timeout=left)

    async def backend(self, device: str, config: ServeConfig, say) -> Backend:
        """The backend of `device`, started from `config` the first time it is asked for, and
        ready unless it is the primary (which may still be loading); one that is restarting is
        waited for. Unusable when it cannot serve here, then and for every later call. A
        caller that leaves (its client disconnected) does not stop the start: other callers
        may be waiting for it."""
        import asyncio

        record = self._records.get(device)
        if record is None:
            if self._closing:
                raise Unusable("serve is stopping")
            record = self._records[device] = DeviceRecord(device)
            record.start = asyncio.ensure_future(self._start(record, config, say))
        if record.state is DeviceState.STARTING and record.start is not None:
            await asyncio.wait({record.start})
        if record.backend is not None:
            await self.settle(record.backend)
        if self._closing:
            raise Unusable("serve is stopping")
        if record.state is DeviceState.UNUSABLE:
            raise Unusable(record.reason)
        assert record.backend is not None
        return record.backend

    async def _start(self, record: DeviceRecord, config: ServeConfig, say) -> None:
        """Plan off the loop, spawn on it, wait for readiness. Any failure makes the device
        unusable and stops what was started; a cancel (serve stopping) leaves the executor to
        `stop`, which stops every executor the pool has spawned."""
        from lemonade_onebit.serve.plan import plan

        try:
            p = await off_loop(plan, config, say)
            backend = self.launch(p)
            await backend.supervisor.wait_ready(self._session)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the device cannot serve
            record.state, record.reason = DeviceState.UNUSABLE, str(exc) or type(exc).__name__
            if record.backend is not None:
                await off_loop(stop_all, [record.backend.supervisor])
            return
        self._ready(record)
        say("ready")

    # -- deaths and restarts ----------------------------------------------------------------

    def _exited(self, record: DeviceRecord, supervisor: Supervisor) -> None:
        """On the loop: an executor exited unasked. One that was serving died; a loading one
        is its loader's to report."""
        current = record.backend is not None and record.backend.supervisor is supervisor
        if self._closing or not current or record.state is not DeviceState.READY:
            return
        self._died(record, supervisor.failure or "it exited")

    def _died(self, record: DeviceRecord, reason: str) -> None:
        import asyncio

        now = time.monotonic()
        if record.ready_since is not None and now - record.ready_since >= STABLE_S:
            record.deaths = 0
        record.deaths += 1
        record.ready_since, record.reason = None, reason
        self.metrics.deaths.inc(record.device)
        self.say(f"{record.device}: the executor died: {reason}", "warning",
                 device=record.device, event="executor_died", reason=reason)
        if record.deaths >= MAX_DEATHS:
            record.state = DeviceState.UNUSABLE
            record.reason = f"the executor died {record.deaths} times in a row, last: {reason}"
            self.say(f"{record.device}: not restarting it again: {record.reason}", "error",
                     device=record.device, event="executor_given_up")
            if record.backend is self._primary and self.gave_up and not self.gave_up.done():
                self.gave_up.set_result(record.reason)
            return
        delay = backoff(record.deaths)
        record.state = DeviceState.RESTARTING
        self.say(f"{record.device}: restarting the executor in {delay:g} s "
                 f"(death {record.deaths} of {MAX_DEATHS} before serve gives up)",
                 device=record.device, event="executor_restarting", delay_s=delay,
                 deaths=record.deaths)
        record.start = asyncio.ensure_future(self._restart(record, delay))

    async def _restart(self, record: DeviceRecord, delay: float) -> None:
        """A new supervisor on the same command line, after `delay`; it takes the dead one's
        place in the backend, so requests and `/health` follow it."""
        import asyncio

        await asyncio.sleep(delay)
        backend = record.backend
        assert backend is not None
        supervisor = self._supervisor(record, backend.supervisor.spec)
        backend.supervisor = supervisor
        self.metrics.restarts.inc(record.device)
        try:
            supervisor.start()  # on the loop, so on the main thread: see `launch`
            await supervisor.wait_ready(self._session)
        except RunError as exc:
            if not self._closing:
                self._died(record, str(exc))
            return
        self._ready(record)
        self.say(f"{record.device}: the executor is back and ready", device=record.device,
                 event="executor_back", load_s=round(self.metrics.load_seconds.get(record.device), 3))

    # -- stop ---------------------------------------------------------------------------------

    def begin_stop(self) -> None:
        """Serve starts to stop: no start or restart any more, and `closed` resolves, which
        ends the streams in flight."""
        self._closing = True
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)

    async def stop(self) -> None:
        """Stop every executor at once, a start in progress included, within one deadline."""
        import asyncio

        self.begin_stop()
        starts = [r.start for r in self._records.values() if r.start and not r.start.done()]
        for task in starts:
            task.cancel()
        if starts:
            await asyncio.gather(*starts, return_exceptions=True)
        await off_loop(self.close)

    def close(self) -> None:
        """`stop` without a loop: serve's last word, a no-op once `stop` has run."""
        self._closing = True
        stop_all([r.backend.supervisor for r in self._records.values() if r.backend is not None])
