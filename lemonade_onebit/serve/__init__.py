"""`1bit serve`: resolve the model, pick the route, start the executor, serve the HTTP front."""

from __future__ import annotations

import base64
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.backends import launchers
from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.backends.executors import (
    executor_hint, explicit_executor, resolve_executor,
)
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import RecipeError, RunError, UsageError
from lemonade_onebit.modelref import ModelRef, resolve_model
from lemonade_onebit.route import check_route, choose_launcher, stamp_route
from lemonade_onebit.serve.process import terminate
from lemonade_onebit.serve.supervisor import ExecutorSpec, Supervisor


def gguf_facts(path):
    """The file's route facts, or None when it cannot be read: the executor then reports why."""
    from lemonade_onebit.ggufmeta import read_facts

    try:
        return read_facts(path)
    except (OSError, ValueError, KeyError, IndexError):
        return None


def apply_recipes_to(config, device, facts, argv, env, say):
    """The recipe set (shipped + plugins, `--recipes FILE` instead, none with `--no-recipes`)
    applied to a llama-server argv and env; a malformed file stops serve with its reason."""
    from lemonade_onebit.recipes import load_recipes, recipe_files

    if config.no_recipes:
        return argv, env
    files = [Path(config.recipes)] if config.recipes else recipe_files()
    try:
        recipes = load_recipes(files)
    except RecipeError as exc:
        raise (UsageError if config.recipes else RunError)(str(exc)) from None
    if not recipes:
        return argv, env
    from lemonade_onebit.backends.llamacpp import LLAMA_FLAG_ALIASES
    from lemonade_onebit.recipes.match import Target, apply_recipes

    target = Target(
        device=device,
        architecture=facts.architecture if facts else None,
        moe=bool(facts and facts.moe),
        drafter="mtp" if config.mtp else "dflash" if config.dflash else "none",
        hadamard_q4_0=bool(facts and facts.hadamard_q4_0 is not None),
    )
    argv, env, applied = apply_recipes(recipes, target, argv, env, LLAMA_FLAG_ALIASES)
    for item in applied:
        say(f"recipe {item.recipe}: {item.describe()}")
    return argv, env


def log(message: str) -> None:
    print(f"1bit serve: {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def merged_env(extra: dict[str, str]) -> dict[str, str]:
    """The executor's environment: ours, plus extras only where the user set nothing."""
    env = dict(os.environ)
    for key, value in extra.items():
        env.setdefault(key, value)
    return env


@dataclass(frozen=True)
class Plan:
    """Everything serve decided before starting anything: the model, its route and the
    executor's command line, environment and private port."""

    model: ModelRef
    launcher: Launcher
    spec: ExecutorSpec
    upstream_key: str


def plan(config: ServeConfig, say=log) -> Plan:
    """Resolve the model, pick the route, build the executor's argv and env; start nothing.
    Everything that can be validated before a process starts is validated here."""
    model = resolve_model(config.model, config.alias)
    facts = None
    if model.kind == "gguf":
        facts = gguf_facts(model.path)
        config, forced = stamp_route(config, facts.hadamard_q4_0 if facts else None)
        if forced:
            say(forced)
    launcher_cls, why = choose_launcher(model.kind, config.device, launchers())
    check_route(config, launcher_cls)
    launcher = launcher_cls()
    if config.device != "auto" and not launcher.available():
        if not explicit_executor(launcher, config):
            raise RunError(
                f"--device {config.device}: this machine has no "
                f"{' or '.join(launcher.info.needs)} (`1bit devices` lists what it has); "
                f"to run it anyway, {executor_hint(launcher)}"
            )
        say(f"no {' or '.join(launcher.info.needs)} detected; running the named executor anyway")
    executor = resolve_executor(launcher, config)
    if config.device == "auto":
        say(why)
    say(f"{model.served_id} on {launcher.info.device} ({executor})")

    port = free_port()
    upstream_key = (os.environ.get("LLAMA_API_KEY")
                    or base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("="))
    argv = launcher.argv(executor, model, port, config)
    env = merged_env(launcher.env(config, model))
    if launcher.info.llama_server_api:
        argv, env = apply_recipes_to(config, launcher.info.device, facts, argv, env, say)
        env["LLAMA_API_KEY"] = upstream_key  # the private port answers only to serve
    spec = ExecutorSpec(argv=argv, env=env, port=port, readiness=launcher.info.readiness)
    return Plan(model, launcher, spec, upstream_key)


def run(config: ServeConfig) -> int:
    """Plan, bind the public port, start the executor, then serve."""
    policy = None
    if config.laya:  # a bad policy file stops serve before anything is decided or started
        from lemonade_onebit.laya.policy import load_policy

        policy = load_policy(config.route_policy)
    p = plan(config)
    listener = listen(config.host, config.port)
    # The executor starts now: the HTTP front is set up while it loads the model.
    supervisor = Supervisor(p.spec, config.load_timeout)
    supervisor.start()
    try:
        return _run_loop(_serve(config, p, supervisor, listener, policy))
    finally:
        if supervisor.proc is not None and supervisor.proc.poll() is None:
            terminate(supervisor.proc)
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


async def _serve(config, p: Plan, supervisor, listener, policy) -> int:
    import asyncio

    import aiohttp
    from aiohttp import web

    from lemonade_onebit.serve.app import ServeApp
    from lemonade_onebit.serve.backend import Backend

    supervisor.attach(asyncio.get_running_loop())
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=config.executor_timeout)
    # llama-server closes idle keep-alive connections after 5 s; drop ours well before that.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        primary = Backend(p.launcher.info.device, p.launcher, supervisor, p.upstream_key)
        router = None
        if policy is not None:
            from lemonade_onebit.serve.laya import LayaRouter

            router = LayaRouter(config, policy, primary, session, log)
        front = ServeApp(config, primary, p.model.served_id, session, router)
        runner = web.AppRunner(front.make_app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.SockSite(runner, listener).start()

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            load = asyncio.ensure_future(supervisor.wait_ready(session))
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
            if router is not None:
                await router.stop()
                log(router.summary())
            await supervisor.stop()
            await runner.cleanup()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
