"""Lemonade integration: the shim stock Lemonade execs as llama-server (`shim.py`), the commands
that register the catalog in a running Lemonade and take it out again (`commands.py`), and the
`lemonade.plugins` entry point for a Python host (`plugin.py`)."""

DEFAULT_URL = "http://localhost:13305"
SHIM_NAME = "onebit-llama-server"
# Lemonade's llama.cpp variants, and the route each one runs on here.
VARIANT_ROUTES = {"cpu": "cpu", "vulkan": "vulkan", "rocm": "rocm", "cuda": "cuda"}
