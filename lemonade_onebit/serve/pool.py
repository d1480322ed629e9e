"""The executor pool: the one owner of every executor serve runs.

It starts them (the primary at once, another device's the first time it is asked for), waits for
their readiness, and stops them all at once: SIGTERM to every process group, one shared
`STOP_GRACE_S` deadline, then SIGKILL, because Lemonade SIGKILLs serve 5 s after its SIGTERM.
Each device has one record: starting, ready, or unusable with the reason; an unusable device is
never started again. Restart policy: none. An executor that dies stays failed (`/health` says
so) and serve's owner (Lemonade, a service manager) restarts serve.

asyncio is imported inside the methods that need it: the primary is spawned before it is.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.backend import Backend
from lemonade_onebit.serve.supervisor import Supervisor

if TYPE_CHECKING:
    import asyncio

    from lemonade_onebit.config import ServeConfig
    from lemonade_onebit.serve.plan import Plan

STOP_GRACE_S = 5.0
KILL_WAIT_S = 2.0


class Unusable(RunError):
    """A device that cannot serve here; its reason is the message."""


class DeviceState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    UNUSABLE = "unusable"


@dataclass
class DeviceRecord:
    device: str
    state: DeviceState = DeviceState.STARTING
    backend: Backend | None = None  # set once its executor is spawned
    reason: str | None = None  # why it is unusable
    start: asyncio.Task | None = None  # a lazy start in progress (plan, spawn, load)


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


class ExecutorPool:
    def __init__(self, load_timeout: float) -> None:
        self.load_timeout = load_timeout
        self._primary: Backend | None = None
        self._records: dict[str, DeviceRecord] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session = None
        self._closing = False

    def launch(self, p: Plan) -> Backend:
        """Spawn the plan's executor now, on the calling thread (the kernel kills the executor
        when that thread ends, so it must be the main thread, which the loop runs on)."""
        device = p.launcher.info.device
        record = self._records.setdefault(device, DeviceRecord(device))
        supervisor = Supervisor(p.spec, self.load_timeout)
        record.backend = Backend(device, p.launcher, supervisor, p.upstream_key,
                                 p.upstream_model)
        if self._primary is None:
            self._primary = record.backend
        if self._loop is not None:
            supervisor.attach(self._loop)
        supervisor.start()
        return record.backend

    @property
    def primary(self) -> Backend:
        """The first backend launched, serve's own model: `/health` and `/v1/models` are its."""
        if self._primary is None:
            raise RuntimeError("no executor launched yet")
        return self._primary

    def attach(self, loop: asyncio.AbstractEventLoop, session) -> None:
        """The loop changes are reported on, and the HTTP session readiness is polled with."""
        self._loop, self._session = loop, session
        for record in self._records.values():
            if record.backend is not None:
                record.backend.supervisor.attach(loop)

    async def load(self, backend: Backend) -> None:
        """Wait until a launched backend is ready; RunError with the executor's reason if not."""
        record = self._records[backend.device]
        try:
            await backend.supervisor.wait_ready(self._session)
        except RunError as exc:
            record.state, record.reason = DeviceState.UNUSABLE, str(exc)
            raise
        record.state = DeviceState.READY

    def unusable(self) -> frozenset[str]:
        return frozenset(d for d, r in self._records.items() if r.state is DeviceState.UNUSABLE)

    def is_ready(self, device: str) -> bool:
        record = self._records.get(device)
        return record is not None and record.state is DeviceState.READY

    async def backend(self, device: str, config: ServeConfig, say) -> Backend:
        """The backend of `device`, started from `config` the first time it is asked for, and
        ready unless it is the primary (which may still be loading). Unusable when it cannot
        serve here, then and for every later call. A caller that leaves (its client
        disconnected) does not stop the start: other callers may be waiting for it."""
        import asyncio

        record = self._records.get(device)
        if record is None:
            if self._closing:
                raise Unusable("serve is stopping")
            record = self._records[device] = DeviceRecord(device)
            record.start = asyncio.ensure_future(self._start(record, config, say))
        if record.start is not None and not record.start.done():
            await asyncio.shield(record.start)
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
        record.state = DeviceState.READY
        say("ready")

    async def stop(self) -> None:
        """Stop every executor at once, a start in progress included, within one deadline."""
        import asyncio

        self._closing = True
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
