"""ONNX Runtime GenAI folders (`genai_config.json`): `ryzenai-server` upstream, or any server with
its command line (`-m DIR --port P [--ctx-size N]`) named by `--onnx-server`."""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

_ONE_AT_A_TIME = "the ONNX server runs one generation at a time"


class OnnxLauncher(Launcher):
    info = LauncherInfo(
        name="onnx", device="onnx", model_kinds=frozenset({"onnx"}), auto_rank=10,
        executor="ryzenai-server", executor_option="onnx_server",
        executor_env="ONEBIT_ONNX_SERVER", options=frozenset({"ctx_size"}),
        refusals={
            "parallel": _ONE_AT_A_TIME,
            "mtp": "ONNX Runtime GenAI has no speculative decoding here",
            "dflash": "ONNX Runtime GenAI has no speculative decoding here",
            "lean": "--lean is for ROCmFPX GGUF files",
            "mmproj": "ONNX GenAI folders carry their own vision model",
        },
    )

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        argv = [executor, "-m", str(model.path), "--port", str(port)]
        if config.ctx_size is not None:
            argv += ["--ctx-size", str(config.ctx_size)]
        return argv + list(config.extra_args)
