"""`architectures.json` from the pinned sources and the launcher registry, and the staleness check.

Which source speaks for a route follows from its executor (`LauncherInfo.executor`): every
llama-server route reads the one llama.cpp pin today, the mlx route mlx-lm, the onnx route the
ONNX Runtime GenAI builder. A route whose executor has no pinned source (zinc, ds4, npu) is listed
with that reason and maps nothing. The file keeps a list per route, so a route with its own pin
can differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lemonade_onebit.registry import sources as src
from lemonade_onebit.registry.locate import Installed

GENERATED = ("by `1bit registry --build` from the pinned sources listed in `sources` (file, "
             "version, sha256); do not edit: `1bit registry --check` fails when it is stale")

LLAMA, MLX, ONNX = "llama.cpp", "mlx-lm", "onnxruntime-genai"
# The source that says what each executor loads.
SOURCE_OF_EXECUTOR = {"llama-server": LLAMA, "lemon-mlx-server": MLX, "ryzenai-server": ONNX}


@dataclass(frozen=True)
class Route:
    device: str
    executor: str


@dataclass(frozen=True)
class Inputs:
    llama: Installed
    mlx: Installed
    transformers: Installed
    ort: Installed


def routes_from_registry() -> list[Route]:
    from lemonade_onebit.backends import launchers

    return sorted((Route(cls.info.device, cls.info.executor) for cls in launchers()),
                  key=lambda r: r.device)


def _llama(inputs: Inputs, reader: src.Reader):
    modules = {}
    for rel in reader.glob("conversion/*.py"):
        modules[rel[len("conversion/"):-len(".py")]] = reader.text(rel)
    reader.text("convert_hf_to_gguf.py")  # the entry point: its changes count as a change
    converted, refused = src.converted(modules["__init__"], reader.text(
        "gguf-py/gguf/constants.py"), modules)
    runtime = src.runtime_archs(reader.text("src/llama-arch.cpp"),
                                reader.text("src/llama-model.cpp"))
    mapped: dict[str, dict] = {}
    for hf_class, conv in converted.items():
        if conv.gguf not in runtime:
            refused[hf_class] = (f"{conv.where} writes GGUF architecture {conv.gguf!r}, which "
                                 f"src/llama-model.cpp builds no model for")
            continue
        mapped[hf_class] = {"gguf": conv.gguf,
                            "from": f"{conv.where} -> gguf {conv.gguf} "
                                    f"(src/llama-model.cpp:{runtime[conv.gguf]})"}
    return mapped, refused, sorted(runtime)


def _mlx(reader: src.Reader, tf: src.Reader):
    modules = {}
    for rel in reader.glob("mlx_lm/models/*.py"):
        if src.binds_model(reader.text(rel)):
            modules[rel.rsplit("/", 1)[-1][:-3]] = rel
    remap = src.mlx_remapping(reader.text("mlx_lm/utils.py"))
    types = src.model_types(tf.text("transformers/models/auto/modeling_auto.py"))
    loadable = {mt: modules[mt] for mt in modules}
    for mt, (target, _) in remap.items():
        if target in modules:
            loadable[mt] = modules[target]
    mapped: dict[str, dict] = {}
    for hf_class, pairs in types.items():
        found = []  # a class several model_types share runs if any of them loads
        for model_type, line in pairs:
            module = loadable.get(model_type)
            if module is None:
                continue
            via = (f" via MODEL_REMAPPING (mlx_lm/utils.py:{remap[model_type][1]})"
                   if model_type in remap else "")
            found.append((model_type, f"transformers/models/auto/modeling_auto.py:{line} "
                                      f"model_type {model_type} -> {module}{via}"))
        if found:
            mapped[hf_class] = {"model_types": [mt for mt, _ in found],
                                "from": "; ".join(where for _, where in found)}
    return mapped, sorted(loadable)


def _ort(reader: src.Reader):
    branches = src.ort_builder(reader.text("onnxruntime_genai/models/builder.py"))
    return {cls: {"from": f"onnxruntime_genai/models/builder.py:{line}"}
            for cls, line in branches.items()}


def build(inputs: Inputs, routes: Iterable[Route]) -> dict:
    """The whole registry document; pure over the files under `inputs` and the routes."""
    readers = {name: src.Reader(i.package, i.version, i.root) for name, i in (
        (LLAMA, inputs.llama), (MLX, inputs.mlx), ("transformers", inputs.transformers),
        (ONNX, inputs.ort))}
    llama_mapped, llama_refused, gguf_loaded = _llama(inputs, readers[LLAMA])
    mlx_mapped, mlx_types = _mlx(readers[MLX], readers["transformers"])
    ort_mapped = _ort(readers[ONNX])
    per_source = {LLAMA: llama_mapped, MLX: mlx_mapped, ONNX: ort_mapped}
    pins = {name: f"{r.package}=={r.version}" for name, r in readers.items()}
    backends: dict[str, dict] = {}
    for route in routes:
        source = SOURCE_OF_EXECUTOR.get(route.executor)
        if source is None:
            backends[route.device] = {"source": None, "executor": route.executor,
                                      "why": f"no pinned source says which architectures "
                                             f"{route.executor} loads; it maps none"}
            continue
        entry = {"source": source, "executor": route.executor, "pin": pins[source]}
        if source == LLAMA:
            entry["gguf"] = gguf_loaded
        elif source == MLX:
            entry["model_types"] = mlx_types
            entry["bridge"] = pins["transformers"]
        backends[route.device] = entry
    architectures: dict[str, dict] = {}
    for source, mapped in per_source.items():
        devices = [d for d, b in backends.items() if b["source"] == source]
        for hf_class, facts in mapped.items():
            arch = architectures.setdefault(hf_class, {"backends": [], "from": {}})
            arch["backends"] += devices
            arch["from"][source] = facts["from"]
            for key in ("gguf", "model_types"):
                if key in facts:
                    arch[key] = facts[key]
    for arch in architectures.values():
        arch["backends"] = [d for d in backends if d in arch["backends"]]
    counts = {d: sum(1 for a in architectures.values() if d in a["backends"]) for d in backends}
    counts["any"] = sum(1 for a in architectures.values() if a["backends"])
    files = sorted((f for r in readers.values() for f in r.read),
                   key=lambda f: (f.package, f.path))
    return {
        "generated": GENERATED,
        "sources": [f.as_dict() for f in files],
        "backends": backends,
        "counts": counts,
        "architectures": dict(sorted(architectures.items())),
        "not_mapped": {cls: {LLAMA: why} for cls, why in sorted(llama_refused.items())
                       if cls not in architectures},
    }


def stale(committed: dict, fresh: dict) -> list[str]:
    """Why the committed registry is not what the sources give now; empty when it is."""
    def by_path(doc):
        return {(s["package"], s["path"]): s for s in doc.get("sources", [])}

    old, new = by_path(committed), by_path(fresh)
    reasons = []
    for key in sorted(old.keys() | new.keys()):
        package, path = key
        if key not in new:
            reasons.append(f"{package} {path} was read for the registry and is gone")
        elif key not in old:
            reasons.append(f"{package} {new[key]['version']} has a new file {path}")
        elif old[key]["version"] != new[key]["version"]:
            reasons.append(f"{package} is {new[key]['version']} here; the registry was built "
                           f"from {old[key]['version']}")
            break
        elif old[key]["sha256"] != new[key]["sha256"]:
            reasons.append(f"{package} {new[key]['version']} {path} changed (sha256 "
                           f"{new[key]['sha256'][:12]}, recorded {old[key]['sha256'][:12]})")
    if not reasons and committed != fresh:
        keys = sorted(k for k in fresh.keys() | committed.keys()
                      if fresh.get(k) != committed.get(k))
        reasons.append(f"the same sources give a different registry ({', '.join(keys)} differ)")
    return reasons
