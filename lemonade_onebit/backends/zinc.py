"""ZINC: the Zig Vulkan engine for GGUF on AMD GPUs. It rejects requests that carry `model`."""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef


class ZincLauncher(Launcher):
    info = LauncherInfo(
        name="zinc", device="zinc", model_kinds=frozenset({"gguf"}), auto_kinds=frozenset(),
        executor="zinc", executor_flag="--zinc", executor_env="ONEBIT_ZINC",
        summary="ZINC `zinc -m M -p P [-c N]`, `RADV_PERFTEST=coop_matrix`, requests without `model`",
        options=frozenset({"ctx_size"}), needs=("vulkan", "amd-gpu"),
    )

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        argv = [executor, "-m", str(model.path), "-p", str(port)]
        if config.ctx_size is not None:
            argv += ["-c", str(config.ctx_size)]
        return argv + list(config.extra_args)

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        return {"RADV_PERFTEST": "coop_matrix"}

    def rewrite_body(self, payload: dict) -> dict | None:
        if "model" not in payload:
            return None
        return {k: v for k, v in payload.items() if k != "model"}
