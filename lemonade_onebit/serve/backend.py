"""One executor behind serve: its launcher, its supervisor and the key its private port wants."""

from __future__ import annotations

from dataclasses import dataclass, field

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.serve.supervisor import Supervisor


@dataclass
class Backend:
    device: str
    launcher: Launcher
    supervisor: Supervisor
    upstream_key: str
    headers: dict[str, str] = field(init=False)  # built once: every forwarded request sends them

    def __post_init__(self) -> None:
        self.headers = {"Content-Type": "application/json",
                        "Authorization": f"Bearer {self.upstream_key}"}

    @property
    def base_url(self) -> str:
        return self.supervisor.base_url

    @property
    def port(self) -> int:
        return self.supervisor.spec.port
