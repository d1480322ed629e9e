"""ONNX Runtime GenAI folders (`genai_config.json`): `ryzenai-server` where it is installed, else
this package's own `onebit-onnx-server` (same command line: `-m DIR --port P [--ctx-size N]`)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

_ONE_AT_A_TIME = "the ONNX server runs one generation at a time"


class OnnxLauncher(Launcher):
    info = LauncherInfo(
        name="onnx", device="onnx", model_kinds=frozenset({"onnx"}), auto_rank=10,
        executor="ryzenai-server", executor_flag="--onnx-server",
        summary="`ryzenai-server -m DIR --port P`, else `onebit-onnx-server` over ONNX Runtime GenAI",
        executor_env="ONEBIT_ONNX_SERVER", options=frozenset({"ctx_size"}),
        auth_env="ONEBIT_ONNX_API_KEY",  # onebit-onnx-server's; ryzenai-server ignores it
        refusals={
            "parallel": _ONE_AT_A_TIME,
            "mtp": "ONNX Runtime GenAI has no speculative decoding here",
            "dflash": "ONNX Runtime GenAI has no speculative decoding here",
            "lean": "--lean is for ROCmFPX GGUF files",
            "mmproj": "ONNX GenAI folders carry their own vision model",
        },
    )

    def installed_executor(self) -> str | None:
        """`ryzenai-server` on PATH first (the upstream server); else ours, if the runtime is here."""
        if shutil.which(self.info.executor):
            return None  # found by the PATH step of the lookup
        ours = Path(sys.executable).parent / "onebit-onnx-server"
        if ours.is_file() and importlib.util.find_spec("onnxruntime_genai") is not None:
            return str(ours)
        return None

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        argv = [executor, "-m", str(model.path), "--port", str(port)]
        if config.ctx_size is not None:
            argv += ["--ctx-size", str(config.ctx_size)]
        return argv + list(config.extra_args)
