"""One executor behind serve: its launcher, its supervisor and the key its private port wants.

The backend outlives its executor's process: when the pool restarts a dead executor, the new
supervisor takes the old one's place here, on the same command line and port, so whoever holds
the backend follows the restart."""

from __future__ import annotations

from dataclasses import dataclass, field

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.serve.supervisor import Status, Supervisor


@dataclass
class Backend:
    device: str
    launcher: Launcher
    supervisor: Supervisor
    upstream_key: str
    upstream_model: str | None = None  # the model id the executor answers to, if it needs one
    headers: dict[str, str] = field(init=False)  # built once: every forwarded request sends them

    def __post_init__(self) -> None:
        self.headers = {"Content-Type": "application/json",
                        "Authorization": f"Bearer {self.upstream_key}"}

    def rewrite_body(self, payload: dict) -> dict | None:
        """The request body as this executor needs it, or None when it takes it unchanged."""
        body = self.launcher.rewrite_body(payload)
        if self.upstream_model is None or (body or payload).get("model") == self.upstream_model:
            return body
        return {**(body or payload), "model": self.upstream_model}

    @property
    def status(self) -> Status:
        """Its executor's state as one consistent snapshot."""
        return self.supervisor.status

    @property
    def base_url(self) -> str:
        return self.supervisor.base_url

    @property
    def port(self) -> int:
        return self.supervisor.spec.port
