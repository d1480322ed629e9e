"""DwarfStar (`ds4-server`): `.1bp` files and DwarfStar GGUFs; ready once `/v1/models` answers."""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef


class Ds4Launcher(Launcher):
    info = LauncherInfo(
        name="ds4", device="ds4", model_kinds=frozenset({"1bp", "gguf"}),
        auto_kinds=frozenset({"1bp"}), auto_rank=10,
        executor="ds4-server", executor_flag="--ds4", executor_env="ONEBIT_DS4",
        summary="`ds4-server -m M --host 127.0.0.1 --port P [--ctx N]`",
        readiness="/v1/models", options=frozenset({"ctx_size"}),
        refusals={"parallel": "ds4-server serves one request at a time",
                  "mtp": "ds4-server has no multi-token-prediction head"},
    )

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        argv = [executor, "-m", str(model.path), "--host", "127.0.0.1", "--port", str(port)]
        if config.ctx_size is not None:
            argv += ["--ctx", str(config.ctx_size)]
        return argv + list(config.extra_args)
