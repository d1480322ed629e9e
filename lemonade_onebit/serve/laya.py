"""`1bit serve --laya`: one routing decision per conversation, and the backend it picks.

The key of a conversation is the hash of its messages up to its first user message, so every
later turn maps to the decision of the first (LRU of 4,096). The first user message is classified
(`lemonade_onebit.laya`); the policy turns the class into a device. The backend of a device other
than the primary's is started the first time it is picked; requests for it wait for its load.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json

from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.serve.backend import Backend

CONVERSATIONS = 4096


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


class LayaRouter:
    def __init__(self, config, policy: dict, primary: Backend, session, log) -> None:
        self.config = config
        self.policy = policy
        self.primary = primary
        self.session = session
        self.log = log
        self.backends: dict[str, Backend] = {primary.device: primary}
        self._starting: dict[str, asyncio.Task] = {}
        self._unusable: dict[str, str] = {}  # device -> why it cannot serve here
        self.decisions: collections.OrderedDict[str, tuple[str, float, str]] = (
            collections.OrderedDict())
        self.routed: collections.Counter[str] = collections.Counter()

    def _available(self, device: str) -> bool:
        if device == self.primary.device:
            return True
        if device in self._unusable:
            return False
        from lemonade_onebit.laya.policy import device_available

        return device_available(device)

    def decide(self, payload: dict) -> tuple[str, float, str]:
        """(class, confidence, device) for the conversation of `payload`, made once."""
        key, text = conversation_key(payload)
        known = self.decisions.get(key)
        if known is not None:
            self.decisions.move_to_end(key)
            return known
        from lemonade_onebit.laya.model import classify
        from lemonade_onebit.laya.policy import pick_device

        decision = classify(text)
        device, why = pick_device(self.policy, decision.klass, decision.confidence,
                                  self._available)
        made = (decision.klass, decision.confidence, device)
        self.decisions[key] = made
        if len(self.decisions) > CONVERSATIONS:
            self.decisions.popitem(last=False)
        self.log(f"laya: new conversation: {decision.klass} {decision.confidence:.2f} -> "
                 f"{device} ({why})")
        return made

    async def route(self, payload: dict):
        """(backend, X-1bit-Route header) for the request; a device that cannot start falls
        back to the default (or the primary) for this and later turns of the conversation."""
        klass, confidence, device = self.decide(payload)
        try:
            backend = await self._backend(device)
        except (RunError, UsageError) as exc:
            self._unusable[device] = str(exc)
            self.log(f"laya: {device} cannot serve ({exc}); {self.policy['default']} serves")
            device = self.policy["default"] if self.policy["default"] in self.backends else (
                self.primary.device)
            backend = self.backends[device]
            self._remember(payload, (klass, confidence, device))
        self.routed[device] += 1
        return backend, f"{klass} {confidence:.2f} {device}"

    def _remember(self, payload: dict, made: tuple[str, float, str]) -> None:
        self.decisions[conversation_key(payload)[0]] = made

    async def _backend(self, device: str) -> Backend:
        if device in self.backends:
            return self.backends[device]
        task = self._starting.get(device)
        if task is None:
            task = asyncio.ensure_future(self._start(device))
            self._starting[device] = task
        try:
            backend = await asyncio.shield(task)
        finally:
            if task.done():
                self._starting.pop(device, None)
        self.backends[device] = backend
        return backend

    async def _start(self, device: str) -> Backend:
        from lemonade_onebit.serve import plan
        from lemonade_onebit.serve.supervisor import Supervisor

        rule = next((r for r in self.policy["classes"].values()
                     if r["device"] == device and r.get("model")), None)
        # Executor flags after `--` belong to the primary's executor.
        config = dataclasses.replace(self.config, device=device, laya=False, route_policy=None,
                                     model=rule["model"] if rule else self.config.model,
                                     extra_args=())
        p = plan(config, say=lambda m: self.log(f"laya: {device}: {m}"))
        supervisor = Supervisor(p.spec, config.load_timeout)
        supervisor.start()
        supervisor.attach(asyncio.get_running_loop())
        await supervisor.wait_ready(self.session)
        self.log(f"laya: {device} ready")
        return Backend(device, p.launcher, supervisor, p.upstream_key)

    async def stop(self) -> None:
        for task in self._starting.values():
            task.cancel()
        for device, backend in self.backends.items():
            if backend is not self.primary:
                await backend.supervisor.stop()

    def summary(self) -> str:
        return "requests routed: " + (" ".join(f"{d} {n}" for d, n in sorted(self.routed.items()))
                                      or "none")

