"""The `lemonade.plugins` entry point `onebit`: the whole plugin as one object for a Python host.

    from importlib.metadata import entry_points
    plugin = entry_points(group="lemonade.plugins")["onebit"].load()
    plugin.recipe, plugin.launchers(), plugin.catalog()
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OnebitPlugin:
    name: str = "onebit"
    # What stock Lemonade execs as llama-server (SPEC §5.2), one script per variant.
    llama_server_shim: str = "onebit-llama-server"

    @property
    def recipe(self) -> dict:
        """How Lemonade's `onebit` recipe starts and probes the engine (SPEC §5.1); the devices
        are the launcher registry's, plugins' included."""
        from lemonade_onebit.backends import launchers
        from lemonade_onebit.lemonade import VARIANT_ROUTES
        from lemonade_onebit.lemonade.shim import script_name

        return {
            "name": "onebit",
            "serve": ["1bit", "serve", "-m", "{model}", "--port", "{port}", "--device", "{device}",
                      "--alias", "{name}"],
            "optional": {"ctx_size": ["--ctx-size", "{ctx_size}"], "embeddings": ["--embedding"],
                         "reranking": ["--reranking"]},
            "version": ["1bit", "version"],
            "readiness": "/health",
            "modes": ["chat", "embeddings", "reranking"],
            "binary_env": "LEMONADE_ONEBIT_BIN",
            "devices": ["auto", *(cls.info.device for cls in launchers())],
            "llama_server_shims": {v: script_name(v) for v in VARIANT_ROUTES},
        }

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
