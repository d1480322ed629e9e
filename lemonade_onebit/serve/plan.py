"""What serve decides before it starts anything: the model, its route, the executor's command line,
environment and private port.

Planning reads files (the model, GGUF metadata, recipes) and may ask `nvidia-smi`/`vulkaninfo`
what the machine has, so once the event loop runs it is called off the loop (`pool.off_loop`).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.backends import launchers
from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.backends.executors import executor_hint, explicit_executor, resolve_executor
from lemonade_onebit.catalog.resolve import resolve_model
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.console import say
from lemonade_onebit.errors import RecipeError, RunError, UsageError
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.route import check_route, choose_launcher, stamp_route
from lemonade_onebit.serve.process import free_port, merged_env
from lemonade_onebit.serve.supervisor import ExecutorSpec


def log(message: str, level: str = "info", **fields) -> None:
    """One whole line on stderr, which serve shares with the executor it relays; `fields` show
    only with `--log-format json`."""
    say("1bit serve", message, level, **fields)


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
    try:  # a file given with --recipes is checked whole; registered ones only where they apply
        recipes = load_recipes(files, None if config.recipes else device)
    except RecipeError as exc:
        raise (UsageError if config.recipes else RunError)(str(exc)) from None
    if not recipes:
        return argv, env
    from lemonade_onebit.backends.llamacpp import flag_key
    from lemonade_onebit.recipes.match import Target, apply_recipes

    target = Target(
        device=device,
        architecture=facts.architecture if facts else None,
        moe=bool(facts and facts.moe),
        drafter="mtp" if config.mtp else "dflash" if config.dflash else "none",
        hadamard_q4_0=bool(facts and facts.hadamard_q4_0 is not None),
    )
    argv, env, applied = apply_recipes(recipes, target, argv, env, flag_key)
    for item in applied:
        say(f"recipe {item.recipe}: {item.describe()}")
    return argv, env


@dataclass(frozen=True)
class Plan:
    """Everything serve decided before starting anything: the model, its route, the executor it
    runs, and the executor's command line, environment and private port."""

    model: ModelRef
    launcher: Launcher
    executor: str
    spec: ExecutorSpec
    upstream_key: str
    upstream_model: str | None = None  # the model id the executor answers to, if it needs one


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
    check_route(config, launcher_cls, launchers())
    launcher = launcher_cls()
    if facts is not None and launcher.info.llama_server_api \
            and not explicit_executor(launcher, config):
        from lemonade_onebit.registry import gguf_refusal

        refusal = gguf_refusal(facts.architecture, launcher.info.device)
        if refusal:
            raise RunError(refusal)
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
    workers = []
    if config.rpc:
        from lemonade_onebit.rpc import check_workers, parse_endpoints

        workers = check_workers(parse_endpoints(config.rpc))
        for worker in workers:
            say(f"RPC worker {worker.describe()}")

    port = free_port()
    auth_env = launcher.info.auth_env
    upstream_key = ((os.environ.get(auth_env) if auth_env else None)
                    or base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("="))
    argv = launcher.argv(executor, model, port, config)
    if workers:
        from lemonade_onebit.rpc import layer_split

        argv = layer_split(argv, workers, facts.block_count if facts else None,
                           local=launcher.info.device != "cpu", say=say)
    env = merged_env(launcher.env(config, model))
    if launcher.info.llama_server_api:
        argv, env = apply_recipes_to(config, launcher.info.device, facts, argv, env, say)
        from lemonade_onebit.serve.slots import size_slots

        argv = size_slots(config, launcher, model, facts, argv, say)
        if facts is not None and facts.moe:
            from lemonade_onebit.moe.apply import place_experts

            argv = place_experts(argv, model.path, launcher.info.device, config.extra_args, say)
    launcher.runs(argv, env)
    if auth_env:
        env[auth_env] = upstream_key  # the private port answers only to serve
    spec = ExecutorSpec(argv=argv, env=env, port=port, readiness=launcher.info.readiness)
    return Plan(model, launcher, executor, spec, upstream_key,
                upstream_model(launcher, executor, model))


def upstream_model(launcher: Launcher, executor: str, model: ModelRef) -> str | None:
    """The model id requests must carry for this executor, or None to pass the client's."""
    return launcher.model_id(executor, model)
