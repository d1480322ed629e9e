"""The run loop of `1bit serve`: plan, bind the public port, start the primary executor, serve
HTTP until SIGTERM/SIGINT (or until the primary's executor keeps dying), then stop in the order
that gives every client an answer: refuse new requests and stop accepting, end the open streams
(an SSE error event and the chunked end), stop every executor, then let the replies in flight
finish, all within the 5 s Lemonade gives serve."""

from __future__ import annotations

import signal
import socket

from lemonade_onebit.config import ServeConfig
from lemonade_onebit.console import set_log_format
from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.plan import Plan, log, plan
from lemonade_onebit.serve.pool import ExecutorPool

# A request head must arrive within this many seconds of the connection (or of the reply
# before it); an idle keep-alive connection is closed after as long. A stream in progress is
# not limited by it.
HEADER_TIMEOUT_S = 60.0
DRAIN_S = 0.3  # after the executors stopped, how long replies in flight get to finish


def run(config: ServeConfig) -> int:
    """Plan, bind the public port, start the executor, then serve."""
    set_log_format(config.log_format)  # first: every line from here on, a failure's too
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
        runner = make_runner(front.make_app())
        await runner.setup()
        site = web.SockSite(runner, listener)
        await site.start()

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
            assert pool.gave_up is not None
            await asyncio.wait({stopped, pool.gave_up}, return_when=asyncio.FIRST_COMPLETED)
            if pool.gave_up.done():  # exit 1, so that Lemonade or a service manager restarts serve
                raise RunError(f"{pool.primary.device}: {pool.gave_up.result()}")
            return 0
        finally:
            pool.begin_stop()  # from here on requests get 503, and open streams end
            await site.stop()
            await pool.stop()
            if router is not None:
                log(router.summary())
            await runner.cleanup()


def make_runner(app):
    """The aiohttp runner of serve's front: a connection that breaks cancels its handler (and
    so its generation), a client that only half-closes still gets its reply, and a request head
    that never completes is dropped after `HEADER_TIMEOUT_S`."""
    from aiohttp import web

    from lemonade_onebit.serve.errors import OpenAIErrorHandler

    class Connection(OpenAIErrorHandler):
        """A client connection whose end of input ends it only when no request is waiting.

        asyncio closes a connection whose peer sent EOF unless the protocol keeps it open, and
        aiohttp's does not: a client that sends its request and shuts its sending side got
        nothing, where llama-server answers it. EOF after a whole request now lets the reply go
        out; EOF on an idle connection or in the middle of a body still closes it at once. EOF
        looks the same whether the client half-closed or went away, so a client that went away
        is seen on the next write: within a token on a stream, at the reply otherwise."""

        __slots__ = ()

        def eof_received(self) -> bool:  # type: ignore[override]  # asyncio's protocol allows it
            # Judged one turn later, once a request whose head just arrived has its handler.
            self._loop.call_soon(self._after_eof)
            return True

        def _after_eof(self) -> None:
            bodies = [payload for _, payload in self._messages]
            if self._current_request is not None:
                bodies.append(self._current_request.content)
            busy = self._request_in_progress or bool(self._messages)
            if busy and all(body.is_eof() for body in bodies):
                self.close()  # no request can follow: the connection ends after the reply
            else:
                self.force_close()

    class Server(web.Server):
        def __call__(self) -> web.RequestHandler:
            handler = super().__call__()
            handler.__class__ = Connection  # same slots: only the EOF handling differs
            return handler

    class Runner(web.AppRunner):
        __slots__ = ()

        async def _make_server(self) -> web.Server:
            server = await super()._make_server()
            server.__class__ = Server
            return server

    return Runner(app, access_log=None, handler_cancellation=True,
                  keepalive_timeout=HEADER_TIMEOUT_S, shutdown_timeout=DRAIN_S)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
