"""MLX: `lemon-mlx-server`, or `mlx_lm.server` where that is what is installed.

`mlx_lm.server` answers only for the model id `default_model` (another id makes it try a Hub
download), and without an existing HF cache folder its `/v1/models` is empty: both are handled here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

MLX_LM_SERVER = "mlx_lm.server"


class MlxLauncher(Launcher):
    info = LauncherInfo(
        name="mlx", device="mlx", model_kinds=frozenset({"mlx", "hf-id"}), auto_rank=20,
        executor="lemon-mlx-server", executor_flag="--mlx-server",
        summary="`lemon-mlx-server`, else `mlx_lm.server`; requests carry the id it expects",
        executor_env="LEMONADE_MLX_SERVER", needs=("apple-silicon",),
    )

    def available(self) -> bool:
        import importlib.util

        return super().available() or importlib.util.find_spec("mlx") is not None

    def installed_executor(self) -> str | None:
        script = Path(sys.executable).parent / MLX_LM_SERVER
        return str(script) if script.is_file() else None

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        return [executor, "--model", _source(model), "--host", "127.0.0.1", "--port", str(port),
                *config.extra_args]

    def model_id(self, executor: str, model: ModelRef) -> str:
        """The model id requests must carry: `mlx_lm.server` answers only for `default_model`,
        `lemon-mlx-server` for the model it was started with."""
        return "default_model" if Path(executor).name == MLX_LM_SERVER else _source(model)

    def upstream_error(self, status: int, body: bytes) -> tuple[int, bytes] | None:
        """`mlx_lm.server` answers a request it cannot handle with `{"error": "<exception text>"}`
        (a message that is not an object gives `'str' object has no attribute 'get'`), and a
        failure inside generation with 404: both become an OpenAI-shaped 400. A reply already in
        the OpenAI shape (`lemon-mlx-server`'s) is kept."""
        try:
            error = json.loads(body).get("error")
        except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
            error = body.decode("utf-8", "replace").strip()
        if isinstance(error, dict):
            return None
        if status == 404:
            status = 400  # serve forwards only routes mlx_lm.server has: 404 is its generation failing
        message = f"the mlx executor refused the request: {error or f'HTTP {status}'}"
        kind = "invalid_request_error" if status < 500 else "server_error"
        shaped = {"error": {"message": message, "type": kind, "code": status}}
        return status, json.dumps(shaped).encode()

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        cache = os.environ.get("HF_HUB_CACHE") or str(Path(tempfile.gettempdir()) / "onebit-hf-cache")
        Path(cache).mkdir(parents=True, exist_ok=True)
        extra = {"HF_HUB_CACHE": cache}
        if model.kind == "mlx":  # a local folder: never reach for the Hub
            extra["HF_HUB_OFFLINE"] = "1"
        return extra


def _source(model: ModelRef) -> str:
    return str(model.path) if model.kind == "mlx" else model.source
