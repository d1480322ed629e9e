"""The `lemonade.plugins` entry point `onebit`: the whole plugin as one object for a Python host.

    from importlib.metadata import entry_points
    plugin = entry_points(group="lemonade.plugins")["onebit"].load()
    plugin.recipe, plugin.launchers(), plugin.catalog()
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OnebitPlugin:
    name: str = "onebit"
    # How Lemonade's `onebit` recipe starts and probes the engine (SPEC §5.1).
    recipe: dict = field(default_factory=lambda: {
        "name": "onebit",
        "serve": ["1bit", "serve", "-m", "{model}", "--port", "{port}", "--device", "{device}",
                  "--alias", "{name}"],
        "optional": {"ctx_size": ["--ctx-size", "{ctx_size}"], "embeddings": ["--embedding"],
                     "reranking": ["--reranking"]},
        "version": ["1bit", "version"],
        "readiness": "/health",
        "modes": ["chat", "embeddings", "reranking"],
        "binary_env": "LEMONADE_ONEBIT_BIN",
        "devices": ["auto", "npu", "hrx", "rocm", "cpu", "vulkan", "zinc", "ds4", "mlx", "onnx",
                    "cuda"],
    })
    # What stock Lemonade execs as llama-server (SPEC §5.2).
    llama_server_shim: str = "onebit-llama-server"

    def launchers(self) -> tuple:
        from lemonade_onebit.backends import launchers

        return launchers()

    def catalog(self) -> dict[str, dict]:
        """Every catalog entry, validated, in Lemonade's `server_models.json` shape."""
        from lemonade_onebit.catalog.schema import load_catalog

        return {e.name: e.lemonade_shape() for e in load_catalog()}

    def version(self) -> str:
        from lemonade_onebit import __version__

        return __version__


PLUGIN = OnebitPlugin()
