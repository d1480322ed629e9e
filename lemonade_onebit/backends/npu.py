"""The XDNA 2 NPU fast lane: NPU folders (`model.q4nx` + `npu/*.elf`) on the XRT runlist executor.

Its executor has no command-line flag of its own in `1bit serve`; it is found through
`$ONEBIT_NPU_SERVER`, then PATH (`onebit-npu-server`). It is ready once `/v1/health` answers.
"""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef


class NpuLauncher(Launcher):
    info = LauncherInfo(
        name="npu", device="npu", model_kinds=frozenset({"npu"}), auto_rank=60,
        executor="onebit-npu-server", executor_env="ONEBIT_NPU_SERVER",
        summary="`onebit-npu-server -m DIR --host 127.0.0.1 --port P` (XRT runlist)",
        readiness="/v1/health", options=frozenset({"ctx_size"}), needs=("npu",),
        refusals={"parallel": "the NPU lane runs one sequence at a time"},
    )

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        argv = [executor, "-m", str(model.path), "--host", "127.0.0.1", "--port", str(port)]
        if config.ctx_size is not None:
            argv += ["--ctx-size", str(config.ctx_size)]
        return argv + list(config.extra_args)
