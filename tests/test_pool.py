"""The executor's machinery with real processes and no serve: exit seen apart from the output,
the state's one writer, the one-line reason of a death, the restart back-off, and every executor
stopped at once under one deadline."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from lemonade_onebit.errors import RunError
from lemonade_onebit.serve import pool
from lemonade_onebit.serve.pool import stop_all
from lemonade_onebit.serve.process import free_port
from lemonade_onebit.serve.supervisor import (
    DRAIN_GRACE_S,
    ExecutorSpec,
    State,
    Status,
    Supervisor,
    telling_line,
)

pytestmark = pytest.mark.executor  # each test starts processes that stand for executors


def _supervisor(script: str) -> Supervisor:
    spec = ExecutorSpec(argv=["/bin/sh", "-c", script], env=dict(os.environ), port=free_port(),
                        readiness="/health")
    supervisor = Supervisor(spec, load_timeout=60)
    supervisor.start()
    return supervisor


def _last(supervisor: Supervisor) -> str | None:
    return supervisor.tail[-1] if supervisor.tail else None


def _wait_line(supervisor: Supervisor, line: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _last(supervisor) != line:
        time.sleep(0.01)
    assert _last(supervisor) == line


def test_an_exit_fails_the_executor_with_its_telling_line():
    supervisor = _supervisor('echo "error: no such model"; echo bye; '
                             'echo "main: server is listening on http://127.0.0.1:1"; exit 3')
    assert supervisor.wait_gone(10)
    assert supervisor.status == Status(State.FAILED,
                                       "sh exited with code 3: error: no such model")
    assert supervisor.returncode == 3


def test_a_death_no_line_explains_names_the_signal_and_points_at_the_log():
    supervisor = _supervisor('echo "slot launch_slot_: id  0 | task 3 | processing task"; '
                             'kill -9 $$')
    assert supervisor.wait_gone(10)
    assert supervisor.failure == (
        "sh was killed by SIGKILL (signal 9), as the kernel's OOM killer or `kill -9` does; "
        "no line of its output says why (its log is above)")


def test_the_telling_line_skips_request_logs_and_traceback_frames():
    llama = ["srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 500",
             "gguf_init_from_file_impl: invalid magic characters: 'this', expected 'GGUF'",
             "srv  send_error: task id = 4, error: the request exceeds the context size",
             "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
             "slot launch_slot_: id  0 | task 5 | processing task"]
    assert telling_line(llama) == llama[1]
    python = ["Traceback (most recent call last):",
              '  File "/srv/errors.py", line 3, in <module>',
              "    raise MemoryError('cannot allocate')",
              "MemoryError: cannot allocate", ""]
    assert telling_line(python) == "MemoryError: cannot allocate"
    assert telling_line(["loading", "main: server is listening on http://x"]) is None


def test_llama_server_log_levels_decide_and_a_burst_is_quoted_by_its_first_line():
    # A corrupt GGUF, as this build of llama-server logs it (time, level, message).
    corrupt = ["0.00.008.939 I srv    load_model: loading model '/tmp/broken.gguf'",
               "0.00.009.180 E gguf_init_from_reader: invalid magic characters: 'this', "
               "expected 'GGUF'",
               "0.00.009.359 E llama_model_load: error loading model: llama_model_loader: "
               "failed to load model from /tmp/broken.gguf",
               "0.00.009.705 E srv    load_model: failed to load model, '/tmp/broken.gguf'",
               "0.00.009.742 I srv    operator(): operator(): cleaning up before exit...",
               "0.00.010.236 E srv  llama_server: exiting due to model loading error"]
    assert telling_line(corrupt) == ("gguf_init_from_reader: invalid magic characters: 'this', "
                                     "expected 'GGUF'")
    # Serving, then killed: a client's bad request is a warning, not why the executor died.
    serving = ["0.05.625.887 I srv  llama_server: listening on http://127.0.0.1:45998",
               "0.05.681.146 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0",
               '0.12.267.889 W srv    operator(): got exception: {"error":{"code":400,'
               '"message":"Expected \'messages\' to be an array"}}']
    assert telling_line(serving) is None


def test_the_restart_back_off_doubles_up_to_its_cap():
    assert [pool.backoff(n) for n in range(1, 5)] == [0.5, 1.0, 2.0, 4.0]
    assert pool.backoff(20) == pool.BACKOFF_CAP_S
    # The budget before serve gives up stays well under Lemonade's load timeout.
    assert sum(pool.backoff(n) for n in range(1, pool.MAX_DEATHS)) < 30


def test_an_exit_is_seen_within_the_drain_grace_while_a_grandchild_keeps_the_pipe():
    started = time.monotonic()
    supervisor = _supervisor('setsid sleep 60 & echo "$!"; exit 2')
    try:
        assert supervisor.wait_gone(10)
        assert time.monotonic() - started < DRAIN_GRACE_S + 3
        assert supervisor.status.state is State.FAILED
        assert "exited with code 2" in supervisor.failure
    finally:
        grandchild = psutil.Process(int(_last(supervisor)))
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
