"""`ServeConfig`: the validated options of `1bit serve`, the one value the rest of serve trusts.

Devices and executor paths are not listed here: they come from the launcher registry
(`serve/options.py` builds the command line from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Options that only some routes honour, by ServeConfig field, with the flag the user typed.
ROUTE_OPTIONS = {
    "ctx_size": "--ctx-size",
    "flash_attn": "--flash-attn",
    "parallel": "--parallel",
    "mtp": "--mtp",
    "mtp_max": "--mtp-max",
    "mtp_p_min": "--mtp-p-min",
    "dflash": "--dflash",
    "mmproj": "--mmproj",
    "lean": "--lean",
    "embedding": "--embedding",
    "reranking": "--reranking",
    "hrx_libhsa": "--hrx-libhsa",
}


@dataclass(frozen=True)
class ServeConfig:
    model: str
    port: int = 8000
    host: str = "127.0.0.1"
    device: str = "auto"
    ctx_size: int | None = None
    flash_attn: str | None = None
    alias: str | None = None
    # Executor paths the user named, by the launcher's flag: (("--llama-server", PATH), ...).
    executors: tuple[tuple[str, str], ...] = ()
    hrx_libhsa: str | None = None
    lean: bool = False
    parallel: int | None = None
    mtp: str | None = None
    dflash: str | None = None
    mtp_max: int | None = None
    mtp_p_min: float | None = None
    mmproj: str | None = None
    embedding: bool = False
    reranking: bool = False
    laya: bool = False
    route_policy: str | None = None
    recipes: str | None = None
    no_recipes: bool = False
    api_key: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    load_timeout: float = 600.0
    executor_timeout: float = 600.0
    max_body: int = 16 * 1024 * 1024

    def executor_path(self, flag: str | None) -> str | None:
        return next((path for f, path in self.executors if f == flag), None) if flag else None

    def given(self, name: str) -> bool:
        """Whether the user set a route option (a flag, or a value other than its default)."""
        value = getattr(self, name)
        return value not in (None, False)
