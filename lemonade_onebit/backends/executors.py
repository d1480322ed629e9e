"""The one place that finds an executor binary: command line, environment, project install, PATH."""

from __future__ import annotations

import os
import shutil

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import RunError


def _named(launcher: Launcher, config: ServeConfig) -> list[tuple[str, str | None]]:
    """The user's own choices, in lookup order: the command-line path, then the environment."""
    info = launcher.info
    named = []
    if info.executor_flag:
        named.append((info.executor_flag, config.executor_path(info.executor_flag)))
    named.append((f"${info.executor_env}", os.environ.get(info.executor_env)))
    return named


def executor_hint(launcher: Launcher) -> str:
    info = launcher.info
    if info.executor_flag:
        return f"pass {info.executor_flag} PATH or set ${info.executor_env}"
    return f"set ${info.executor_env}"


def explicit_executor(launcher: Launcher, config: ServeConfig) -> bool:
    """Whether the user named the executor (flag or environment) rather than leaving it to us."""
    return any(value for _, value in _named(launcher, config))


def resolve_executor(launcher: Launcher, config: ServeConfig) -> str:
    info = launcher.info
    candidates = _named(launcher, config)
    for origin, value in candidates:
        if value:
            if not (os.path.isfile(value) and os.access(value, os.X_OK)):
                raise RunError(f"{origin} names {value}, which is not an executable file")
            return os.path.abspath(value)
    installed = launcher.installed_executor()
    if installed:
        return installed
    on_path = shutil.which(info.executor)
    if on_path:
        return on_path
    raise RunError(
        f"no {info.executor} found for the {info.device} route: {executor_hint(launcher)}, "
        "or run `make setup` to install it"
    )
