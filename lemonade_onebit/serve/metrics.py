"""Serve's own Prometheus metrics, in the text exposition format (0.0.4), written by hand.

Recording costs a dict update (a counter) or a bisect and three additions (a histogram): the
relay only timestamps its first and last body bytes, and the tokens of a reply are read once, at
its end, from the `usage` (or llama-server's `timings`) the executor put in its last event or
non-streamed body. The executor's own exposition, where it has one (llama-server's `llamacpp:`
metrics), is appended after serve's with a `device` label on every sample, one family per name
across backends, and nothing that would clash with serve's `onebit_` names.
"""

from __future__ import annotations

import bisect
import math
import re

# Time to first token, seconds: a warm 135M model answers in tens of ms, a cold 30B prompt in tens
# of seconds.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Decode rate, tokens per second of one stream, from a large model on a CPU to a small one on a GPU.
DECODE_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 35.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0,
                  1000.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A sample line: name, optional labels (quoted values with escapes), value, optional timestamp.
_SAMPLE = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
    r'(?P<rest>[ \t]+\S+(?:[ \t]+-?\d+)?)[ \t]*$')
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def escape_label(value: str) -> str:
    """A label value as the exposition format quotes it: `\\`, `"` and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: whole numbers without a fraction, `+Inf`, `-Inf`, `NaN`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def labels(names: tuple[str, ...], values: tuple) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{escape_label(str(v))}"' for n, v in zip(names, values)) + "}"


class Metric:
    kind = ""

    def __init__(self, name: str, help: str, label_names: tuple[str, ...] = ()) -> None:
        assert _NAME.fullmatch(name), name
        self.name, self.help, self.label_names = name, help, label_names

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError

    def render(self) -> list[str]:
        return self.header() + self.samples()


class Counter(Metric):
    kind = "counter"

    def __init__(self, name: str, help: str, label_names: tuple[str, ...] = ()) -> None:
        super().__init__(name, help, label_names)
        self.values: dict[tuple, float] = {}

    def inc(self, *label_values, amount: float = 1) -> None:
        self.values[label_values] = self.values.get(label_values, 0) + amount

    def get(self, *label_values) -> float:
        return self.values.get(label_values, 0)

    def samples(self) -> list[str]:
        return [f"{self.name}{labels(self.label_names, key)} {number(value)}"
                for key, value in sorted(self.values.items(), key=lambda kv: str(kv[0]))]


class Gauge(Counter):
    kind = "gauge"

    def set(self, *label_values, value: float) -> None:
        self.values[label_values] = value


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name: str, help: str, label_names: tuple[str, ...],
                 buckets: tuple[float, ...]) -> None:
        super().__init__(name, help, label_names)
        assert list(buckets) == sorted(set(buckets)) and not math.isinf(buckets[-1]), buckets
        self.buckets = buckets
        # per label values: [count in each bucket alone (the last is above every bound), sum]
        self.series: dict[tuple, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *label_values) -> None:
        series = self.series.get(label_values)
        if series is None:
            series = self.series[label_values] = ([0] * (len(self.buckets) + 1), [0.0])
        series[0][bisect.bisect_left(self.buckets, value)] += 1  # `le`: bound >= value
        series[1][0] += value

    def count(self, *label_values) -> int:
        series = self.series.get(label_values)
        return sum(series[0]) if series else 0

    def samples(self) -> list[str]:
        out = []
        names = (*self.label_names, "le")
        for key, (counts, total) in sorted(self.series.items(), key=lambda kv: str(kv[0])):
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts):
                running += n
                out.append(f"{self.name}_bucket{labels(names, (*key, number(bound)))} {running}")
            plain = labels(self.label_names, key)
            out.append(f"{self.name}_sum{plain} {number(total[0])}")
            out.append(f"{self.name}_count{plain} {running}")
        return out


def render(metrics: list[Metric]) -> str:
    return "".join(line + "\n" for metric in metrics for line in metric.render())


class ServeMetrics:
    """Every metric serve keeps, whatever the device."""

    def __init__(self) -> None:
        self.requests = Counter(
            "onebit_requests_total", "HTTP requests answered by serve, by route and status "
            "(path `other` for paths serve has no route for; status 499: the client left first)",
            ("path", "status"))
        self.ttft = Histogram(
            "onebit_time_to_first_token_seconds", "Streamed requests: from the request's arrival "
            "to the executor's first event", ("device",), TTFT_BUCKETS)
        self.decode_rate = Histogram(
            "onebit_decode_tokens_per_second", "Streamed requests of 2 tokens or more: tokens "
            "after the first per second, first to last event", ("device",), DECODE_BUCKETS)
        self.prompt_tokens = Counter(
            "onebit_prompt_tokens_total", "Prompt tokens of the completions served, as the "
            "executor reported them", ("device",))
        self.completion_tokens = Counter(
            "onebit_completion_tokens_total", "Tokens generated for the completions served, as the "
            "executor reported them", ("device",))
        self.deaths = Counter(
            "onebit_executor_deaths_total", "Executor exits nobody asked for (a crash, the OOM "
            "killer), failed restarts included", ("device",))
        self.restarts = Counter(
            "onebit_executor_restarts_total", "Executor restarts begun after a death", ("device",))
        self.load_seconds = Gauge(
            "onebit_executor_load_seconds", "The executor's last start, from its spawn to ready",
            ("device",))
        self.ready = Gauge(
            "onebit_executor_ready", "1 while the device's executor serves, else 0", ("device",))
        self.all: list[Metric] = [self.requests, self.ttft, self.decode_rate, self.prompt_tokens,
                                  self.completion_tokens, self.deaths, self.restarts,
                                  self.load_seconds, self.ready]

    def tokens(self, device: str, usage: tuple[int, int] | None) -> None:
        if usage is not None:
            self.prompt_tokens.inc(device, amount=usage[0])
            self.completion_tokens.inc(device, amount=usage[1])

    def stream(self, device: str, ttft: float | None, decode_span: float,
               usage: tuple[int, int] | None) -> None:
        """One streamed reply that ended: its first-event delay, tokens and decode rate."""
        if ttft is not None:
            self.ttft.observe(ttft, device)
        self.tokens(device, usage)
        if usage is not None and usage[1] >= 2 and decode_span > 0:
            self.decode_rate.observe((usage[1] - 1) / decode_span, device)

    def render(self, states: dict[str, str]) -> str:
        for device, state in states.items():
            self.ready.set(device, value=1 if state == "ready" else 0)
            for counter in (self.deaths, self.restarts):  # 0 from the start, so rate() works
                counter.inc(device, amount=0)
        return render(self.all)

    @property
    def names(self) -> frozenset[str]:
        """Every family and sample name serve's own exposition uses."""
        names = set()
        for metric in self.all:
            names.add(metric.name)
            if isinstance(metric, Histogram):
                names.update(metric.name + s for s in ("_bucket", "_sum", "_count"))
        return frozenset(names)


# -- the tokens of a reply -------------------------------------------------------------------------

def usage_of(data: bytes) -> tuple[int, int] | None:
    """(prompt tokens, completion tokens) from the last `"usage"` object in `data` (a reply body,
    or the last bytes of a stream), else from llama-server's `"timings"` (whose prompt count
    leaves out the tokens it took from its cache: `cache_n` adds them back); None without either."""
    import json

    decoder = json.JSONDecoder()
    for key, read in ((b'"usage":', _from_usage), (b'"timings":', _from_timings)):
        at = data.rfind(key)
        if at < 0:
            continue
        text = data[at + len(key):at + len(key) + 4096].decode("utf-8", "replace").lstrip()
        try:
            value, _ = decoder.raw_decode(text)
        except ValueError:
            continue
        found = read(value) if isinstance(value, dict) else None
        if found is not None:
            return found
    return None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _from_usage(usage: dict) -> tuple[int, int] | None:
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    return (prompt, completion) if prompt is not None and completion is not None else None


def _from_timings(timings: dict) -> tuple[int, int] | None:
    prompt, done = _count(timings.get("prompt_n")), _count(timings.get("predicted_n"))
    cached = _count(timings.get("cache_n", 0))
    if prompt is None or done is None or cached is None:
        return None
    return prompt + cached, done


# -- the executor's exposition ------------------------------------------------------------------------

class Family:
    def __init__(self, name: str) -> None:
        self.name = name
        self.help: str | None = None
        self.type: str | None = None
        self.samples: list[str] = []
        self.sample_names: set[str] = set()


def executor_families(text: str, device: str, into: dict[str, Family]) -> None:
    """Add the families of an executor's exposition to `into`, each sample labelled with
    `device` (so two backends' samples stay apart); a line that is not valid exposition is left
    out, so one executor's odd line cannot fail the whole scrape."""
    current: Family | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and _NAME.fullmatch(parts[2]):
                current = into.setdefault(parts[2], Family(parts[2]))
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP":
                    current.help = current.help or rest
                elif current.type is None:
                    current.type = rest
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name = match.group("name")
        family = current if current is not None and _belongs(name, current.name) else None
        if family is None:
            family = into.setdefault(name, Family(name))
        own = match.group("labels") or ""
        if _HAS_DEVICE.search(own):
            label_text = own
        else:
            label_text = f'device="{escape_label(device)}"' + (f",{own}" if own.strip() else "")
        family.samples.append(f"{name}{{{label_text}}}{match.group('rest')}")
        family.sample_names.add(name)


_HAS_DEVICE = re.compile(r'(?:^|,)\s*device\s*=')


def _belongs(sample: str, family: str) -> bool:
    return sample == family or (sample.startswith(family) and sample[len(family):] in _SUFFIXES)


def render_families(families: dict[str, Family], taken: frozenset[str]) -> str:
    """The families as exposition text, leaving out any whose name or samples' names serve's
    own metrics use (`taken`)."""
    out = []
    for family in families.values():
        if not family.samples or family.name in taken or family.sample_names & taken:
            continue
        if family.help is not None:
            out.append(f"# HELP {family.name} {family.help}")
        if family.type is not None:
            out.append(f"# TYPE {family.name} {family.type}")
        out.extend(family.samples)
    return "".join(line + "\n" for line in out)
