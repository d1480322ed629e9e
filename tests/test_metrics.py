"""Serve's Prometheus metrics at `/metrics` and `--log-format json`: the exposition formatter, the
token reader and the executor merge on their own; then against the real SmolLM2 llama-server,
the counts after streamed and plain chats, a 401 and a 404, llama-server's own metrics
appended, a death and its restart, and every stderr line of a JSON-logging serve."""

from __future__ import annotations

import json
import math
import re
import stat
import subprocess
import urllib.request

import psutil
import pytest
from conftest import ONEBIT, http, sse_events, wait_for

from lemonade_onebit import console
from lemonade_onebit.backends.llamacpp import CpuLauncher
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.serve.metrics import (
    Counter,
    Gauge,
    Histogram,
    ServeMetrics,
    executor_families,
    render,
    render_families,
    usage_of,
)
from lemonade_onebit.serve.supervisor import executor_record

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}

# -- a strict reader of the text exposition format ------------------------------------------------

_METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({_METRIC_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? "
                    r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|Inf|NaN))(?: -?\d+)?$")
HELP = re.compile(rf"^# HELP ({_METRIC_NAME}) (?:[^\\\n]|\\[\\n])*$")
TYPE = re.compile(rf"^# TYPE ({_METRIC_NAME}) (counter|gauge|histogram|summary|untyped)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, keyed by name and labels, after checking the whole text:
    each line a HELP, TYPE or sample; one TYPE per family, before its samples; a family's samples
    together; no series twice; a histogram's buckets cumulative with `+Inf` equal to `_count`."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset], float] = {}
    types: dict[str, str] = {}
    finished: set[str] = set()
    current = None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            assert HELP.match(line), line
            continue
        if line.startswith("# TYPE "):
            match = TYPE.match(line)
            assert match, line
            name = match.group(1)
            assert name not in types, f"second TYPE for {name}"
            types[name] = match.group(2)
            if current is not None:
                finished.add(current)
            current = name
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, label_text, value = match.groups()
        family = next((f for f in (name, re.sub(r"_(bucket|sum|count|total)$", "", name))
                       if f in types), name)
        assert family not in finished, f"{family}'s samples are not together"
        if family != current:
            if current is not None:
                finished.add(current)
            current = family
        labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(label_text or ""))
        key = (name, labels)
        assert key not in samples, f"series twice: {line}"
        samples[key] = float(value.replace("Inf", "inf"))
    for name, kind in types.items():
        if kind != "histogram":
            continue
        series = {k for k in samples if k[0] == name + "_count"}
        for _, labels in series:
            buckets = sorted(((float(dict(ls)["le"].replace("Inf", "inf")), v)
                              for (n, ls), v in samples.items()
                              if n == name + "_bucket" and ls - {("le", dict(ls)["le"])} == labels))
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), f"{name} buckets are not cumulative"
            assert buckets[-1][0] == math.inf and counts[-1] == samples[(name + "_count", labels)]
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# -- unit -----------------------------------------------------------------------------------------------


def test_exposition_escapes_label_values_and_help():
    counter = Counter("onebit_x_total", 'a "help"\nwith \\ and a newline', ("path", "status"))
    counter.inc('/a"b\\c\nd', 200)
    counter.inc('/a"b\\c\nd', 200)
    gauge = Gauge("onebit_g", "g", ())
    gauge.set(value=1.5)
    text = render([counter, gauge])
    assert text.splitlines() == [
        '# HELP onebit_x_total a "help"\\nwith \\\\ and a newline',
        "# TYPE onebit_x_total counter",
        'onebit_x_total{path="/a\\"b\\\\c\\nd",status="200"} 2',
        "# HELP onebit_g g",
        "# TYPE onebit_g gauge",
        "onebit_g 1.5",
    ]
    assert value(parse(text), "onebit_x_total", path='/a"b\\c\nd', status="200") == 2


def test_histogram_buckets_are_cumulative_and_end_at_inf():
    hist = Histogram("onebit_h_seconds", "h", ("device",), (0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 3.0, 99.0):  # 0.1 is in le="0.1": a bound includes its value
        hist.observe(v, "cpu")
    hist.observe(2.0, "vulkan")
    samples = parse(render([hist]))
    assert [value(samples, "onebit_h_seconds_bucket", device="cpu", le=le)
            for le in ("0.1", "1", "10", "+Inf")] == [2, 3, 4, 5]
    assert value(samples, "onebit_h_seconds_count", device="cpu") == 5
    assert value(samples, "onebit_h_seconds_sum", device="cpu") == pytest.approx(102.65)
    assert value(samples, "onebit_h_seconds_bucket", device="vulkan", le="1") == 0
    assert value(samples, "onebit_h_seconds_bucket", device="vulkan", le="10") == 1
    assert hist.count("cpu") == 5 and hist.count("npu") == 0


def test_serve_metrics_render_and_decode_rate():
    metrics = ServeMetrics()
    metrics.stream("cpu", 0.2, 0.5, (31, 11))  # 10 tokens after the first in 0.5 s
    metrics.stream("cpu", 0.3, 0.0, (5, 1))  # one token: no rate
    metrics.tokens("cpu", None)
    samples = parse(metrics.render({"cpu": "ready", "vulkan": "restarting"}))
    assert value(samples, "onebit_decode_tokens_per_second_count", device="cpu") == 1
    assert value(samples, "onebit_decode_tokens_per_second_sum", device="cpu") == 20
    assert value(samples, "onebit_time_to_first_token_seconds_count", device="cpu") == 2
    assert value(samples, "onebit_prompt_tokens_total", device="cpu") == 36
    assert value(samples, "onebit_completion_tokens_total", device="cpu") == 12
    assert value(samples, "onebit_executor_ready", device="cpu") == 1
    assert value(samples, "onebit_executor_ready", device="vulkan") == 0


def test_usage_of_reads_usage_then_timings():
    body = (b'{"choices":[{"message":{"content":"say \\"usage\\": 3"}}],'
            b'"usage":{"completion_tokens":5,"prompt_tokens":31,"total_tokens":36},'
            b'"timings":{"cache_n":30,"prompt_n":1,"predicted_n":5}}')
    assert usage_of(body) == (31, 5)
    # a chat stream's last chunks, framing included: timings only, cached tokens added back
    tail = (b'1a2\r\ndata: {"choices":[{"delta":{}}],"timings":{"cache_n":7,"prompt_n":24,'
            b'"prompt_ms":1.5,"predicted_n":9,"predicted_per_second":80.1}}\n\n\r\n'
            b'e\r\ndata: [DONE]\n\n\r\n')
    assert usage_of(tail) == (31, 9)
    assert usage_of(b'{"timings":{"prompt_n":4,"predicted_n":2}}') == (4, 2)  # onnx: no cache_n
    assert usage_of(b"data: [DONE]") is None
    assert usage_of(b'"usage":{"prompt_tokens":"x"}') is None
    assert usage_of(b'"usage":{"prompt_tokens":-1,"completion_tokens":2}') is None
    assert usage_of(b'"timings":{"prompt_n":3,"predi') is None  # cut off


def test_executor_metrics_get_a_device_label_and_never_clash_with_serves():
    exposition = ("# HELP llamacpp:tokens_predicted_total Number of tokens\n"
                  "# TYPE llamacpp:tokens_predicted_total counter\n"
                  "llamacpp:tokens_predicted_total 13\n"
                  "# TYPE llamacpp:slot gauge\n"
                  'llamacpp:slot{id="0"} 1 1700000000000\n'
                  "this line is not exposition\n"
                  "# TYPE onebit_requests_total counter\n"
                  "onebit_requests_total 1\n")
    families: dict = {}
    executor_families(exposition, "cpu", families)
    executor_families(exposition.replace("13", "7"), "vul\"kan", families)
    text = render_families(families, ServeMetrics().names)
    samples = parse(ServeMetrics().render({}) + text)
    assert value(samples, "llamacpp:tokens_predicted_total", device="cpu") == 13
    assert value(samples, "llamacpp:tokens_predicted_total", device='vul"kan') == 7
    assert value(samples, "llamacpp:slot", device="cpu", id="0") == 1
    assert text.count("# TYPE llamacpp:tokens_predicted_total") == 1
    assert "onebit_requests_total" not in text and "not exposition" not in text


def test_llama_server_gets_metrics_once():
    model = ModelRef("gguf", __import__("pathlib").Path("/m/q.gguf"), "q")
    argv = CpuLauncher().argv("/x/llama-server", model, 9, ServeConfig(model="q"))
    assert argv.count("--metrics") == 1 and argv.index("--metrics") == argv.index("--jinja") + 1
    theirs = ServeConfig(model="q", extra_args=("--metrics", "--temp", "0.7"))
    argv = CpuLauncher().argv("/x/llama-server", model, 9, theirs)
    assert argv.count("--metrics") == 1


def test_json_log_lines(capfd):
    console.set_log_format("json")
    try:
        console.say("1bit serve", "cpu: the executor died", device="cpu", event="executor_died")
        console.say("1bit serve", "cannot listen", level="error")
        for raw in ("0.01.002.003 E llama_model_load: error loading model",
                    "plain executor words"):
            console.line(raw, **executor_record(raw, "llama-server"))
    finally:
        console.set_log_format("text")
    console.say("1bit serve", "back to text")
    lines = capfd.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines[:4]]
    assert all(set(r) >= {"time", "level", "message"} for r in records)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", records[0]["time"])
    assert records[0] == {**records[0], "level": "info", "source": "1bit serve",
                          "message": "cpu: the executor died", "device": "cpu",
                          "event": "executor_died"}
    assert records[1]["level"] == "error"
    assert records[2]["level"] == "error" and records[2]["source"] == "llama-server"
    assert records[2]["message"] == "llama_model_load: error loading model"
    assert records[3]["level"] == "info" and records[3]["message"] == "plain executor words"
    assert lines[4] == "1bit serve: back to text"


def test_log_format_json_makes_a_startup_failure_one_json_line(tmp_path):
    done = subprocess.run([ONEBIT, "serve", "-m", str(tmp_path / "missing.gguf"),
                           "--log-format", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert len(records) == 1 and records[0]["level"] == "error", done.stderr
    assert "missing.gguf" in records[0]["message"]
    done = subprocess.run([ONEBIT, "serve", "-m", "x", "--log-format", "xml"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice: 'xml'" in done.stderr


# -- against the real llama-server ------------------------------------------------------------------------


def _scrape(serve) -> tuple[dict, str]:
    status, raw = http("GET", serve.url + "/metrics", headers=AUTH)
    assert status == 200, raw
    text = raw.decode()
    return parse(text), text


def _stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url + "/v1/chat/completions",
                                 data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json", **AUTH})
    with urllib.request.urlopen(req, timeout=120) as resp:
        raw = resp.read()
    return [json.loads(e) for e in sse_events(raw) if e != b"[DONE]"]


CHAT = {"messages": [{"role": "user", "content": "Count to twenty."}], "max_tokens": 8,
        "ignore_eos": True, "temperature": 0}


def test_metrics_count_requests_tokens_and_ttft_and_append_llama_servers(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2), "--api-key", KEY).wait_ready()
    status, raw = http("GET", serve.url + "/metrics")
    assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
    before, _ = _scrape(serve)

    events = _stream(serve.url, CHAT)
    timings = events[-1]["timings"]  # a chat stream reports timings, not usage
    streamed = (timings["cache_n"] + timings["prompt_n"], timings["predicted_n"])
    status, raw = http("POST", serve.url + "/v1/chat/completions", CHAT, AUTH)
    assert status == 200
    usage = json.loads(raw)["usage"]
    plain = (usage["prompt_tokens"], usage["completion_tokens"])
    assert http("GET", serve.url + "/no/such/route", headers=AUTH)[0] == 404
    assert http("GET", serve.url + "/v1/models")[0] == 401
    assert http("GET", serve.url + "/health")[0] == 200

    after, text = _scrape(serve)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("onebit_requests_total", path="/v1/chat/completions", status="200") == 2
    assert grew("onebit_requests_total", path="other", status="404") == 1
    assert grew("onebit_requests_total", path="/v1/models", status="401") == 1
    assert grew("onebit_requests_total", path="/health", status="200") >= 1
    assert value(after, "onebit_requests_total", path="/metrics", status="401") == 1
    assert value(after, "onebit_requests_total", path="/metrics", status="200") == 1  # `before`
    assert grew("onebit_time_to_first_token_seconds_count", device="cpu") == 1
    assert 0 < grew("onebit_time_to_first_token_seconds_sum", device="cpu") < 30
    assert grew("onebit_decode_tokens_per_second_count", device="cpu") == 1
    assert streamed[0] > 0 and streamed[1] == plain[1] == 8
    assert grew("onebit_prompt_tokens_total", device="cpu") == streamed[0] + plain[0]
    assert grew("onebit_completion_tokens_total", device="cpu") == streamed[1] + plain[1]
    assert value(after, "onebit_executor_ready", device="cpu") == 1
    assert value(after, "onebit_executor_load_seconds", device="cpu") > 0
    assert value(after, "onebit_executor_deaths_total", device="cpu") == 0
    # llama-server's own, appended, labelled, and counting the same tokens
    assert "# TYPE llamacpp:tokens_predicted_total counter" in text
    assert text.index("llamacpp:") > text.rindex("onebit_")
    assert value(after, "llamacpp:tokens_predicted_total", device="cpu") >= 16
    assert grew("llamacpp:tokens_predicted_total", device="cpu") == 16


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_death_and_restart_are_counted_and_metrics_answer_while_it_is_down(
        start_serve, tmp_path, smollm2, llama_server):
    gate, launches = tmp_path / "gate", tmp_path / "launches"
    # The first launch starts at once; the restart waits for the test's gate.
    gated = _script(tmp_path, "restart-gated-llama-server",
                    f'echo start >> "{launches}"\n'
                    f'if [ "$(wc -l < "{launches}")" -gt 1 ]; then\n'
                    f'  while [ ! -e "{gate}" ]; do sleep 0.05; done\nfi\n'
                    f'exec "{llama_server}" "$@"')
    serve = start_serve("-m", str(smollm2), "--llama-server", gated, "--api-key", KEY)
    serve.wait_ready()
    first, _ = _scrape(serve)
    assert value(first, "onebit_executor_restarts_total", device="cpu") == 0
    (child,) = psutil.Process(serve.proc.pid).children()
    child.kill()  # as the OOM killer does
    wait_for(lambda: len(launches.read_text().split()) == 2, "the restart begin")
    down, text = _scrape(serve)  # the executor is down: serve's own still answer
    assert "llamacpp:" not in text
    assert value(down, "onebit_executor_ready", device="cpu") == 0
    assert value(down, "onebit_executor_deaths_total", device="cpu") == 1
    assert value(down, "onebit_executor_restarts_total", device="cpu") == 1
    gate.touch()
    wait_for(lambda: serve.health() == 200, "the restart end", timeout=60)
    back, text = _scrape(serve)
    assert value(back, "onebit_executor_ready", device="cpu") == 1
    assert value(back, "onebit_executor_restarts_total", device="cpu") == 1
    assert value(back, "onebit_executor_load_seconds", device="cpu") > 0
    assert "llamacpp:tokens_predicted_total" in text


def test_log_format_json_gives_only_json_lines_through_start_request_and_sigterm(
        start_serve, smollm2):
    serve = start_serve("-m", str(smollm2), "--log-format", "json").wait_ready()
    assert http("POST", serve.url + "/v1/chat/completions", CHAT)[0] == 200
    serve.stop()
    assert serve.proc.returncode == 0
    lines = [line for line in serve.log().splitlines() if line.strip()]
    records = []
    for line in lines:
        record = json.loads(line)  # every line, the executor's too
        assert isinstance(record, dict) and {"time", "level", "message"} <= set(record), line
        records.append(record)
    ours = [r for r in records if r.get("source") == "1bit serve"]
    assert any(r["message"].startswith("ready on http://127.0.0.1:") for r in ours)
    assert any(r.get("source") == "llama-server" for r in records)
    assert {r["level"] for r in records} <= {"debug", "info", "warning", "error"}
