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
    executor_option: str | None  # ServeConfig field of its --<executor> path flag, if it has one
    executor_env: str  # environment variable naming the executor
    readiness: str = "/health"
    options: frozenset[str] = frozenset()  # ROUTE_OPTIONS fields this route honours
    refusals: dict[str, str] = field(default_factory=dict)  # field -> why the route refuses it
    llama_server_api: bool = False  # relays /tokenize, /slots, /props, /metrics, ...
    auto_rank: int = 0  # higher wins under --device auto
    auto_kinds: frozenset[str] | None = None  # kinds auto may pick it for (None: model_kinds)
    needs: tuple[str, ...] = ()  # device kinds (devices.py), any of which makes it available

    def auto_for(self, kind: str) -> bool:
        return kind in (self.model_kinds if self.auto_kinds is None else self.auto_kinds)


class Launcher:
    info: ClassVar[LauncherInfo]

    def installed_executor(self) -> str | None:
        """The executor this project installed, if any."""
        return None

    def available(self) -> bool:
        """Whether this machine has the device the route runs on."""
        if not self.info.needs:
            return True
        from lemonade_onebit.devices import has

        return any(has(kind) for kind in self.info.needs)

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        raise NotImplementedError

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        """Extra environment for the executor; serve never lets it override what the user set."""
        return {}

    def rewrite_body(self, payload: dict) -> dict | None:
        """The request body as this executor needs it, or None when it takes it unchanged."""
        return None
