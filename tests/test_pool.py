"""The executor's machinery with real processes and no serve: exit seen apart from the output,
the state's one writer, and every executor stopped at once under one deadline."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.pool import stop_all
from lemonade_onebit.serve.process import free_port
from lemonade_onebit.serve.supervisor import DRAIN_GRACE_S, ExecutorSpec, State, Status, Supervisor

pytestmark = pytest.mark.executor  # each test starts processes that stand for executors


def _supervisor(script: str) -> Supervisor:
    spec = ExecutorSpec(argv=["/bin/sh", "-c", script], env=dict(os.environ), port=free_port(),
                        readiness="/health")
    supervisor = Supervisor(spec, load_timeout=60)
    supervisor.start()
    return supervisor


def _wait_line(supervisor: Supervisor, line: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and supervisor.last_error_line() != line:
        time.sleep(0.01)
    assert supervisor.last_error_line() == line


def test_an_exit_fails_the_executor_with_its_telling_line():
    supervisor = _supervisor('echo "error: no such model"; echo bye; exit 3')
    assert supervisor.wait_gone(10)
    assert supervisor.status == Status(State.FAILED,
                                       "/bin/sh exited with code 3: error: no such model")
    assert supervisor.returncode == 3


def test_an_exit_is_seen_within_the_drain_grace_while_a_grandchild_keeps_the_pipe():
    started = time.monotonic()
    supervisor = _supervisor('setsid sleep 60 & echo "$!"; exit 2')
    try:
        assert supervisor.wait_gone(10)
        assert time.monotonic() - started < DRAIN_GRACE_S + 3
        assert supervisor.status.state is State.FAILED
        assert "exited with code 2" in supervisor.failure
    finally:
        grandchild = psutil.Process(int(supervisor.last_error_line()))
        assert grandchild.is_running()  # it held the pipe all along
        grandchild.kill()


def test_stop_all_signals_every_group_at_once_under_one_deadline():
    # Both ignore SIGTERM, and so do their children: only the SIGKILL after the deadline ends them.
    supervisors = [_supervisor('trap "" TERM; echo up; sleep 60') for _ in range(2)]
    for supervisor in supervisors:
        _wait_line(supervisor, "up")
    children = [c for s in supervisors for c in psutil.Process(s.proc.pid).children()]
    started = time.monotonic()
    stop_all(supervisors, grace=1.0)
    took = time.monotonic() - started
    assert 1.0 <= took < 1.9, f"{took:.2f} s: not one shared deadline"
    assert all(s.status == Status(State.STOPPED) for s in supervisors)
    _, alive = psutil.wait_procs(children, timeout=2)
    assert not alive, "a child in an executor's group outlived the stop"


def test_a_stop_does_not_turn_into_a_failure():
    supervisor = _supervisor("echo up; exec sleep 60")
    _wait_line(supervisor, "up")
    stop_all([supervisor])
    assert supervisor.status == Status(State.STOPPED)
    assert supervisor.returncode == -15


def test_a_missing_executor_fails_to_start_with_its_reason():
    spec = ExecutorSpec(argv=["/nowhere/llama-server"], env=dict(os.environ), port=free_port(),
                        readiness="/health")
    supervisor = Supervisor(spec, load_timeout=60)
    with pytest.raises(RunError, match="cannot start /nowhere/llama-server: No such file"):
        supervisor.start()
    assert supervisor.status.state is State.FAILED and supervisor.exited
