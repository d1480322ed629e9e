"""The run loop of `1bit serve`: plan, bind the public port, start the primary executor, serve
HTTP until SIGTERM/SIGINT, then let the pool stop every executor."""

from __future__ import annotations

import signal
import socket

from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.plan import Plan, log, plan
from lemonade_onebit.serve.pool import ExecutorPool


def run(config: ServeConfig) -> int:
    """Plan, bind the public port, start the executor, then serve."""
    policy = None
    if config.laya:  # a bad policy file stops serve before anything is decided or started
        from lemonade_onebit.laya.policy import load_policy

        policy = load_policy(config.route_policy)
    p = plan(config)
    listener = listen(config.host, config.port)
    pool = ExecutorPool(config.load_timeout)
    try:
        # The executor starts now: the HTTP front is set up while it loads the model.
        pool.launch(p)
        return _run_loop(_serve(config, p, pool, listener, policy))
    finally:
        pool.close()
        listener.close()


def listen(host: str, port: int) -> socket.socket:
    """Bind the public port before anything starts, so a taken port fails fast."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
    except OSError as exc:
        raise RunError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


def _run_loop(main) -> int:
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def _serve(config: ServeConfig, p: Plan, pool: ExecutorPool, listener, policy) -> int:
    import asyncio

    import aiohttp
    from aiohttp import web

    from lemonade_onebit.serve.app import ServeApp

    loop = asyncio.get_running_loop()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=config.executor_timeout)
    # llama-server closes idle keep-alive connections after 5 s; drop ours well before that.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        pool.attach(loop, session)
        router = None
        if policy is not None:
            from lemonade_onebit.serve.laya import LayaRouter

            router = LayaRouter(config, policy, pool, log)
        front = ServeApp(config, pool, p.model.served_id, session, router)
        # Once the executors are stopped, what is still in flight gets 1 s to finish its reply.
        runner = web.AppRunner(front.make_app(), access_log=None, handler_cancellation=True,
                               shutdown_timeout=1.0)
        await runner.setup()
        await web.SockSite(runner, listener).start()

        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            load = asyncio.ensure_future(pool.load(pool.primary))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({load, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not load.done():
                load.cancel()
                return 0
            load.result()  # raises RunError with the executor's reason
            log(f"ready on http://{_url_host(config.host)}:{config.port}")
            await stopped
            return 0
        finally:
            await pool.stop()
            if router is not None:
                log(router.summary())
            await runner.cleanup()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
