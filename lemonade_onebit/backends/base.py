"""What a launcher is: a descriptor (plain data) and a small class for argv, env and request quirks.

Serve, `1bit devices` and the docs read the descriptors through the registry; only the class knows
how to start its executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef


@dataclass(frozen=True)
class LauncherInfo:
    name: str
    device: str
    model_kinds: frozenset[str]
    executor: str  # program name looked up on PATH
    executor_option: str  # ServeConfig field holding the --<executor> path
    executor_env: str  # environment variable naming the executor
    readiness: str = "/health"
    options: frozenset[str] = frozenset()  # ROUTE_OPTIONS fields this route honours
    refusals: dict[str, str] = field(default_factory=dict)  # field -> why the route refuses it
    llama_server_api: bool = False  # relays /tokenize, /slots, /props, /metrics, ...
    auto_rank: int = 0  # higher wins under --device auto


class Launcher:
    info: ClassVar[LauncherInfo]

    def installed_executor(self) -> str | None:
        """The executor this project installed, if any."""
        return None

    def available(self) -> bool:
        """Whether this machine has the device the route runs on."""
        return True

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        raise NotImplementedError

    def env(self, config: ServeConfig) -> dict[str, str]:
        """Extra environment for the executor; never overrides what the user already set."""
        return {}
