"""`ServeConfig`: the validated options of `1bit serve`, the one value the rest of serve trusts.

Devices and executor paths are not listed here: they come from the launcher registry
(`serve/options.py` builds the command line from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RouteOption:
    """A `1bit serve` option that only some routes honour: plain data that the command line, its
    `--help`, the validation and the refusals read. The built-in ones are below; a launcher
    declares its own in `LauncherInfo.own_options`, and they reach it through
    `ServeConfig.option(name)`."""

    name: str  # its key: a ServeConfig field for a built-in, else a key of ServeConfig.values
    flags: tuple[str, ...]  # its spellings on `1bit serve`; the last is the one messages quote
    help: str
    kind: str = "text"  # text | count (a whole number > 0) | count-or-auto | probability | switch
    # | choice
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    needs: str = ""  # what a route must have to honour it: the reason the others refuse it

    @property
    def flag(self) -> str:
        return self.flags[-1]


KINDS = ("text", "count", "count-or-auto", "probability", "switch", "choice")

BUILTIN_OPTIONS = (
    RouteOption("ctx_size", ("-c", "--ctx-size"), "context of one request; GPU routes give it to "
                "each slot", "count", "N"),
    RouteOption("flash_attn", ("-fa", "--flash-attn"), "flash attention", "choice",
                choices=("on", "off", "auto")),
    RouteOption("lean", ("--lean",), "ROCmFP4/ROCmI4/H32 files", "switch"),
    RouteOption("parallel", ("--parallel",), "parallel request slots, or auto (GPU routes' "
                "default): as many as the GPU's free memory holds, at most 64", "count-or-auto",
                "N|auto"),
    RouteOption("mtp", ("--mtp",), "multi-token-prediction head", metavar="HEAD.gguf"),
    RouteOption("dflash", ("--dflash",), "DFlash draft model", metavar="DRAFT.gguf"),
    RouteOption("mtp_max", ("--mtp-max",), "most tokens drafted", "count", "N"),
    RouteOption("mtp_p_min", ("--mtp-p-min",), "least draft probability", "probability", "P"),
    RouteOption("mmproj", ("--mmproj",), "multimodal projector", metavar="F"),
    RouteOption("embedding", ("--embedding",), "serve /v1/embeddings", "switch"),
    RouteOption("reranking", ("--reranking",), "serve /v1/rerank", "switch"),
    RouteOption("hrx_libhsa", ("--hrx-libhsa",), "libhsa for the HRX route", metavar="PATH"),
    RouteOption("rpc", ("--rpc",), "llama.cpp RPC workers (`1bit rpc-worker`) to place layers on",
                metavar="HOST:PORT,...", needs="llama.cpp's RPC backend (the llama-server routes)"),
)

# Built-in route options by ServeConfig field, with the flag messages quote.
ROUTE_OPTIONS = {option.name: option.flag for option in BUILTIN_OPTIONS}


@dataclass(frozen=True)
class ServeConfig:
    model: str
    port: int = 8000
    host: str = "127.0.0.1"
    device: str = "auto"
    gpus: tuple[int, ...] = ()  # `--device cuda:0,1`: the GPUs picked, by CUDA's numbers
    ctx_size: int | None = None
    flash_attn: str | None = None
    alias: str | None = None
    # Executor paths the user named, by the launcher's flag: (("--llama-server", PATH), ...).
    executors: tuple[tuple[str, str], ...] = ()
    hrx_libhsa: str | None = None
    lean: bool = False
    parallel: int | None = None  # None: auto (sized on GPU routes, llama-server's own on cpu)
    mtp: str | None = None
    dflash: str | None = None
    mtp_max: int | None = None
    mtp_p_min: float | None = None
    mmproj: str | None = None
    embedding: bool = False
    reranking: bool = False
    rpc: str | None = None
    laya: bool = False
    route_policy: str | None = None
    recipes: str | None = None
    no_recipes: bool = False
    api_key: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    load_timeout: float = 600.0
    executor_timeout: float = 600.0
    max_body: int = 16 * 1024 * 1024
    log_format: str = "text"  # text | json (one JSON object per stderr line)
    # Values of the route options launchers declare themselves: ((name, value), ...).
    values: tuple[tuple[str, object], ...] = ()

    def executor_path(self, flag: str | None) -> str | None:
        return next((path for f, path in self.executors if f == flag), None) if flag else None

    def option(self, name: str):
        """A route option's value, built-in or declared by a launcher (None when not given)."""
        if name in ROUTE_OPTIONS:
            return getattr(self, name)
        return next((value for key, value in self.values if key == name), None)

    def given(self, name: str) -> bool:
        """Whether the user set a route option (a flag, or a value other than its default)."""
        return self.option(name) not in (None, False)
