"""Recipes: the schema's rules, matching and application as pure functions, and serve applying a
recipe file to the real llama-server."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import ONEBIT

from lemonade_onebit.backends.llamacpp import flag_key
from lemonade_onebit.errors import RecipeError
from lemonade_onebit.recipes import load_recipes, recipe_files
from lemonade_onebit.recipes.match import Target, apply_recipes, matches
from lemonade_onebit.recipes.schema import Recipe, load_recipe_file

GOOD = {"id": "cpu-batch", "match": {"device": ["cpu"]}, "args": ["-b", "256"],
        "why": "fewer stalls", "measured": "+3.1% prompt tok/s, SmolLM2, 5 rounds"}
CPU_LLAMA = Target("cpu", "llama", False, "none", False)


def _file(tmp_path, recipes) -> object:
    path = tmp_path / "recipes.json"
    path.write_text(json.dumps(recipes))
    return path


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
        ({"match": {"gpu": ["x"]}}, "match.gpu: Extra inputs are not permitted"),
        ({"measured": None}, "measured"),
        ({"args": ["256", "-b"]}, "args must start with a flag"),
        ({"args": [], "env": {}}, "a recipe must add args or env"),
        ({"match": {"drafter": "eagle"}}, "match.drafter"),
    ],
)
def test_each_schema_rule_names_file_recipe_and_reason(tmp_path, change, reason):
    recipe = {**GOOD, **change}
    if change.get("measured", "x") is None:
        del recipe["measured"]
    path = _file(tmp_path, [recipe])
    with pytest.raises(RecipeError) as err:
        load_recipe_file(path)
    message = str(err.value)
    assert str(path) in message and "recipe cpu-batch" in message and reason in message


def test_duplicate_ids_and_bad_json_are_errors(tmp_path):
    with pytest.raises(RecipeError, match="recipe cpu-batch: duplicate id"):
        load_recipe_file(_file(tmp_path, [GOOD, GOOD]))
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(RecipeError, match="not JSON"):
        load_recipe_file(bad)


def test_matching_on_every_key():
    recipe = Recipe.model_validate({**GOOD, "match": {"device": ["cpu"], "architecture": ["qwen3"],
                                                      "moe": True, "drafter": "mtp",
                                                      "hadamard_q4_0": False}})
    assert matches(recipe, Target("cpu", "qwen3", True, "mtp", False))
    assert not matches(recipe, Target("cuda", "qwen3", True, "mtp", False))
    assert not matches(recipe, Target("cpu", "llama", True, "mtp", False))
    assert not matches(recipe, Target("cpu", "qwen3", False, "mtp", False))
    assert not matches(recipe, Target("cpu", "qwen3", True, "none", False))
    assert not matches(recipe, Target("cpu", "qwen3", True, "mtp", True))


def test_narrow_before_broad_user_flags_win_and_env_is_not_overridden():
    narrow = Recipe.model_validate({**GOOD, "id": "llama-threads",
                                    "match": {"architecture": ["llama"]}, "args": ["-t", "2"],
                                    "env": {"OMP_WAIT_POLICY": "PASSIVE", "MINE": "recipe"}})
    broad = Recipe.model_validate({**GOOD, "id": "any-threads", "match": {},
                                   "args": ["--threads", "8", "-b", "128", "--no-repack"]})
    argv, env, applied = apply_recipes(
        [narrow, broad], CPU_LLAMA, ["llama-server", "--batch-size", "64"], {"MINE": "user"},
        flag_key)
    assert argv == ["llama-server", "--batch-size", "64", "-t", "2", "--no-repack"]
    assert env == {"MINE": "user", "OMP_WAIT_POLICY": "PASSIVE"}
    assert [a.recipe for a in applied] == ["llama-threads", "any-threads"]
    assert applied[0].describe() == "-t 2, OMP_WAIT_POLICY=PASSIVE"


def test_shipped_recipes_pass_the_validator():
    from lemonade_onebit.recipes import SHIPPED

    shipped = load_recipe_file(SHIPPED)
    assert all(r.measured for r in shipped)
    assert recipe_files()[0] == SHIPPED
    assert load_recipes(recipe_files()) == shipped  # no plugin adds recipes here


def test_serve_applies_a_recipe_file_to_llama_server(start_serve, tmp_path, smollm2):
    path = _file(tmp_path, [GOOD, {**GOOD, "id": "cuda-only", "match": {"device": ["cuda"]},
                                   "args": ["-ub", "64"]}])
    serve = start_serve("-m", str(smollm2), "--recipes", str(path)).wait_ready()
    child = serve.children()[0].cmdline()
    assert child[child.index("-b") + 1] == "256"
    assert "-ub" not in child
    assert "1bit serve: recipe cpu-batch: -b 256" in serve.log()


def test_user_flag_beats_the_recipe(start_serve, tmp_path, smollm2):
    path = _file(tmp_path, [GOOD])
    serve = start_serve("-m", str(smollm2), "--recipes", str(path), "--", "-b",
                        "512").wait_ready()
    child = serve.children()[0].cmdline()
    assert child.count("-b") == 1 and child[child.index("-b") + 1] == "512"
    assert "recipe cpu-batch" not in serve.log()


def test_malformed_recipe_file_stops_serve(smollm2, tmp_path):
    path = _file(tmp_path, [{**GOOD, "args": ["256"]}])
    out = subprocess.run([ONEBIT, "serve", "-m", str(smollm2), "--recipes", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"{path}: recipe cpu-batch: args: args must start with a flag" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.executor
def test_the_cuda_backend_sampling_recipe_keeps_greedy_output_and_grammar_requests(
        start_serve, smollm2):
    """The shipped cuda recipe's flag on the pinned llama-server (its CPU backend here: the same
    sampler code runs in the graph): greedy text is unchanged, with or without the filters serve
    takes off greedy requests under the flag, and a request with a JSON schema,
    which llama-server samples on the CPU under the flag, still answers valid JSON."""
    from conftest import http

    from lemonade_onebit.recipes import SHIPPED

    (recipe,) = [r for r in load_recipe_file(SHIPPED) if r.id == "cuda-backend-sampling"]
    plain = start_serve("-m", str(smollm2), "--no-recipes")
    sampled = start_serve("-m", str(smollm2), "--no-recipes", "--", *recipe.args)
    greedy = {"messages": [{"role": "user", "content": "Name three colours."}],
              "max_tokens": 24, "temperature": 0}
    schema = {"messages": [{"role": "user", "content": "Give a name and an age."}],
              "max_tokens": 48, "temperature": 0, "response_format": {
                  "type": "json_schema", "json_schema": {"name": "p", "schema": {
                      "type": "object", "required": ["name", "age"], "properties": {
                          "name": {"type": "string"}, "age": {"type": "integer"}}}}}}
    texts = []
    for serve in (plain.wait_ready(), sampled.wait_ready()):
        status, body = http("POST", serve.url + "/v1/chat/completions", greedy)
        assert status == 200, body
        texts.append(json.loads(body)["choices"][0]["message"]["content"])
    executor = sampled.children()[0]
    assert "-bs" in executor.cmdline()
    # Under -bs serve sends greedy requests without top-k, top-p and min-p (the executor's slot
    # shows it); straight to the executor, with its default filters, the text is the same.
    argv = executor.cmdline()
    direct = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
    auth = {"Authorization": f"Bearer {executor.environ()['LLAMA_API_KEY']}"}
    status, body = http("GET", direct + "/slots", headers=auth)
    assert status == 200, body
    used = [s["params"] for s in json.loads(body) if s.get("params", {}).get("top_k") == 0]
    assert used and used[0]["top_p"] == 1.0 and used[0]["min_p"] == 0.0
    status, body = http("POST", direct + "/v1/chat/completions", greedy, headers=auth)
    assert status == 200, body
    texts.append(json.loads(body)["choices"][0]["message"]["content"])
    assert texts[0] and texts[0] == texts[1] == texts[2]
    status, body = http("POST", sampled.url + "/v1/chat/completions", schema)
    assert status == 200, body
    answer = json.loads(json.loads(body)["choices"][0]["message"]["content"])
    assert isinstance(answer["name"], str) and isinstance(answer["age"], int)


def test_a_registered_file_for_other_devices_is_not_validated_on_this_route(tmp_path):
    """Serve's start on the cpu route skips a file whose recipes all name other devices (no
    pydantic import), and still validates it, with its reason, where one of them is served."""
    path = _file(tmp_path, [{**GOOD, "match": {"device": ["cuda"]}, "measured": ""}])
    assert load_recipes([path], "cpu") == []
    with pytest.raises(RecipeError, match="measured"):
        load_recipes([path], "cuda")
    with pytest.raises(RecipeError, match="measured"):
        load_recipes([path])
    mixed = _file(tmp_path, [{**GOOD, "match": {"device": ["cuda"]}}, {**GOOD, "id": "any"}])
    assert [r.id for r in load_recipes([mixed], "cpu")] == [GOOD["id"], "any"]
