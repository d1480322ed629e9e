"""`1bit serve`: resolve the model, pick the route, start the executor, serve the HTTP front.

    plan.py        what serve decides before starting anything (pure but for file reads)
    run.py         the run loop: bind, start the primary, serve, stop
    pool.py        the one owner of executors: start, readiness, stop, one record per device
    supervisor.py  one executor process: output, exit, readiness, signals
    process.py     the one spawning helper (own process group, dies with serve)
    app.py         the HTTP front and the relay; laya.py the per-conversation route with --laya
"""

from __future__ import annotations

from lemonade_onebit.serve.plan import Plan, log, plan
from lemonade_onebit.serve.process import free_port, merged_env
from lemonade_onebit.serve.run import listen, run

__all__ = ["Plan", "free_port", "listen", "log", "merged_env", "plan", "run"]
