"""The one place that finds an executor binary: command line, environment, project install, PATH."""

from __future__ import annotations

import os
import shutil

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.config import EXECUTOR_OPTIONS, ServeConfig
from lemonade_onebit.errors import RunError


def explicit_executor(launcher: Launcher, config: ServeConfig) -> bool:
    """Whether the user named the executor (flag or environment) rather than leaving it to us."""
    info = launcher.info
    return bool(getattr(config, info.executor_option) or os.environ.get(info.executor_env))


def resolve_executor(launcher: Launcher, config: ServeConfig) -> str:
    info = launcher.info
    flag = EXECUTOR_OPTIONS[info.executor_option]
    candidates = (
        (flag, getattr(config, info.executor_option)),
        (f"${info.executor_env}", os.environ.get(info.executor_env)),
    )
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
        f"no {info.executor} found for the {info.device} route: pass {flag} PATH, "
        f"set ${info.executor_env}, or run `make setup` to install it"
    )
