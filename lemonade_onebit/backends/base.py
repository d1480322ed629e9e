"""What a launcher is: a descriptor (plain data) and a small class for argv, env and request quirks.

Serve, `1bit devices` and the docs read the descriptors through the registry; only the class knows
how to start its executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from lemonade_onebit.config import RouteOption, ServeConfig
from lemonade_onebit.modelref import ModelRef


@dataclass(frozen=True)
class LauncherInfo:
    """Everything about a route that is data. `1bit serve`'s options and `--help`, the validated
    config, `--device auto`, `1bit devices`, the Laya policy's devices and the README's route table
    are all generated from these, so a launcher from another package is a first-class route."""

    name: str
    device: str  # its `--device` value
    model_kinds: frozenset[str]  # ModelRef kinds it serves
    executor: str  # program name looked up on PATH
    executor_env: str  # environment variable naming the executor
    executor_flag: str | None = None  # `1bit serve` flag naming the executor's path
    summary: str = ""  # what runs, in a few words (--help, the README's route table)
    readiness: str = "/health"  # path polled until it answers 200
    options: frozenset[str] = frozenset()  # built-in route options (config.ROUTE_OPTIONS) it honours
    own_options: tuple[RouteOption, ...] = ()  # route options it declares itself, and honours
    refusals: Mapping[str, str] = field(default_factory=dict)  # field -> why the route refuses it
    llama_server_api: bool = False  # relays /tokenize, /slots, /props, /metrics, ...
    auth_env: str | None = None  # the executor's API-key variable: its private port answers only to serve
    flag_aliases: Mapping[str, str] = field(default_factory=dict)  # the executor's flag spellings
    auto_rank: int = 0  # higher wins under --device auto
    auto_kinds: frozenset[str] | None = None  # kinds auto may pick it for (None: model_kinds)
    needs: tuple[str, ...] = ()  # device kinds (devices.py), any of which makes it available

    def honours(self, name: str) -> bool:
        return name in self.options or any(o.name == name for o in self.own_options)

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

    def model_id(self, executor: str, model: ModelRef) -> str | None:
        """The model id requests must carry, for an executor that insists on one; None passes
        the client's."""
        return None

    def runs(self, argv: list[str], env: dict[str, str]) -> None:
        """The executor's final command line and environment (recipes, slots and expert
        placement applied), for a launcher whose handling of requests depends on them."""

    def rewrite_body(self, payload: dict) -> dict | None:
        """The request body as this executor needs it, or None when it takes it unchanged."""
        return None

    def upstream_error(self, status: int, body: bytes) -> tuple[int, bytes] | None:
        """An error reply of this executor as status and body in the OpenAI shape
        (`{"error":{"message","type","code"}}`), or None when it answers in that shape already.
        Serve calls it only for replies of status 400 and above, so answers never pay for it."""
        return None
