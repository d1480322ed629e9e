"""`1bit serve --laya`: one routing decision per conversation, and the backend it picks.

The key of a conversation is the hash of its messages up to its first user message, so every
later turn maps to the decision of the first (LRU of 4,096). The first user message is classified
(`lemonade_onebit.laya`); the policy turns the class into a device. The decision is a pure
function (`decide`) run off the loop: the first one loads the classifier, and asking whether a
device is here may run `vulkaninfo`. The backend of a device comes from the pool, which starts it
the first time it is picked, and restarts it when it dies; a device the pool found unusable (it
could not start, or it kept dying) sends its conversations, old and new, to the fallback. Every
routed reply carries `X-1bit-Route`, its errors too: `ROUTE` holds the header for the HTTP
front of the request being handled.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import hashlib
import json

from lemonade_onebit.serve.backend import Backend
from lemonade_onebit.serve.pool import ExecutorPool, Unusable, off_loop

CONVERSATIONS = 4096

# The X-1bit-Route of the request this task handles, for the replies the front makes itself.
ROUTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("route", default=None)


def conversation_key(payload: dict) -> tuple[str, str]:
    """(key, text to classify): the messages up to the first user message, and that message."""
    if "messages" in payload:
        messages = payload["messages"] if isinstance(payload["messages"], list) else []
        head, text = [], ""
        for m in messages:
            head.append(m)
            if isinstance(m, dict) and m.get("role") == "user":
                text = _text(m.get("content"))
                break
    else:
        head, text = [payload.get("prompt")], _text(payload.get("prompt"))
    digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()
    return digest, text


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def decide(policy: dict, text: str, primary: str,
           unusable: frozenset[str]) -> tuple[tuple[str, float, str], str]:
    """((class, confidence, device), why) for a conversation's first user message. The primary's
    device is always available; an unusable one never is; any other is if this machine has it."""
    from lemonade_onebit.laya.model import classify
    from lemonade_onebit.laya.policy import device_available, pick_device

    def available(device: str) -> bool:
        if device == primary:
            return True
        return device not in unusable and device_available(device)

    decision = classify(text)
    device, why = pick_device(policy, decision.klass, decision.confidence, available)
    return (decision.klass, decision.confidence, device), why


class LayaRouter:
    def __init__(self, config, policy: dict, pool: ExecutorPool, log) -> None:
        self.config = config
        self.policy = policy
        self.pool = pool
        self.log = log
        self.decisions: collections.OrderedDict[str, tuple[str, float, str]] = (
            collections.OrderedDict())
        self.routed: collections.Counter[str] = collections.Counter()
        self._configs: dict = {}  # device -> the ServeConfig its executor is planned from

    def _known(self, key: str) -> tuple[str, float, str] | None:
        known = self.decisions.get(key)
        if known is not None:
            self.decisions.move_to_end(key)
        return known

    def _record(self, key: str, made: tuple[str, float, str], why: str) -> tuple[str, float, str]:
        known = self._known(key)  # another turn decided it while this one was classifying
        if known is not None:
            return known
        self.decisions[key] = made
        if len(self.decisions) > CONVERSATIONS:
            self.decisions.popitem(last=False)
        klass, confidence, device = made
        self.log(f"laya: new conversation: {klass} {confidence:.2f} -> {device} ({why})")
        return made

    def _decide_args(self, text: str) -> tuple:
        return self.policy, text, self.pool.primary.device, self.pool.unusable()

    def decide(self, payload: dict) -> tuple[str, float, str]:
        """(class, confidence, device) for the conversation of `payload`, made once. Blocking:
        `route` makes the decision off the loop."""
        key, text = conversation_key(payload)
        return self._known(key) or self._record(key, *decide(*self._decide_args(text)))

    async def route(self, payload: dict) -> tuple[Backend, str]:
        """(backend, X-1bit-Route header) for the request; a device that cannot start falls
        back to the default (or the primary) for this and later turns of the conversation."""
        key, text = conversation_key(payload)
        made = self._known(key)
        if made is None:
            made = self._record(key, *await off_loop(decide, *self._decide_args(text)))
        klass, confidence, device = made
        try:
            backend = await self._backend(device)
        except Unusable as exc:
            backend = await self._fallback()
            if not self.pool.closing:
                self.log(f"laya: {device} cannot serve ({exc}); {backend.device} serves")
                self.decisions[key] = (klass, confidence, backend.device)
            device = backend.device
        self.routed[device] += 1
        header = f"{klass} {confidence:.2f} {device}"
        ROUTE.set(header)
        return backend, header

    async def _fallback(self) -> Backend:
        """The policy's default device when it is ready, else the primary, as it is: when the
        primary cannot serve either, the front says why."""
        default = self.policy["default"]
        if self.pool.is_ready(default) and not self.pool.closing:
            try:
                return await self._backend(default)
            except Unusable:
                pass
        await self.pool.settle(self.pool.primary)
        return self.pool.primary

    def _backend(self, device: str):
        config = self._configs.get(device)
        if config is None:
            rule = next((r for r in self.policy["classes"].values()
                         if r["device"] == device and r.get("model")), None)
            # Executor flags after `--` belong to the primary's executor; an executor path the
            # user named goes to the routes that read that flag.
            from lemonade_onebit.backends import launcher_for

            cls = launcher_for(device)
            flag = cls.info.executor_flag if cls is not None else None
            config = self._configs[device] = dataclasses.replace(
                self.config, device=device, laya=False, route_policy=None,
                model=rule["model"] if rule else self.config.model, extra_args=(),
                executors=tuple(e for e in self.config.executors if e[0] == flag))
        return self.pool.backend(device, config, lambda m: self.log(f"laya: {device}: {m}"))

    def summary(self) -> str:
        return "requests routed: " + (" ".join(f"{d} {n}" for d, n in sorted(self.routed.items()))
                                      or "none")
