"""A non-stream reply with the served id as its `model`, every other byte as the executor wrote it.

Clients and scripts read the executor's formatting (llama-server writes compact JSON, and the
upstream engine's own smoke test greps for `"model":"x"`), so the reply is spliced, not re-encoded.
"""

from __future__ import annotations

import json
import re

# A JSON string (escapes included) or a bracket: enough to know the nesting of every key.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]', re.DOTALL)
_STRING_VALUE = re.compile(rb'\s*:\s*("(?:[^"\\]|\\.)*")', re.DOTALL)


def with_model(data: bytes, served_id: str) -> bytes:
    """`data` with its top-level `"model"` string set to `served_id`; unchanged when it has none
    or already says so."""
    depth = 0
    for token in _TOKEN.finditer(data):
        first = data[token.start()]
        if first in b"{[":
            depth += 1
        elif first in b"}]":
            depth -= 1
        elif depth == 1 and token.group() == b'"model"':
            value = _STRING_VALUE.match(data, token.end())
            if value is None:
                continue  # "model" as a value, or a non-string model
            try:
                if json.loads(value.group(1)) == served_id:
                    return data
            except ValueError:
                return data
            new = json.dumps(served_id, ensure_ascii=False).encode()
            return data[:value.start(1)] + new + data[value.end(1):]
    return data
