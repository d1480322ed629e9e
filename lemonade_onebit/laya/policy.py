"""The Laya policy: which device serves each class, with a confidence floor and a default."""

from __future__ import annotations

from pathlib import Path

from lemonade_onebit.errors import UsageError
from lemonade_onebit.laya.model import CLASSES, LONG_DOC
from lemonade_onebit.validation import read_json, reasons

SHIPPED = Path(__file__).with_name("policy.json")


def route_devices() -> tuple[str, ...]:
    """Every device the launcher registry knows, plugins' included."""
    from lemonade_onebit.backends import launchers

    return tuple(cls.info.device for cls in launchers())


def load_policy(path: str | None = None) -> dict:
    """The policy file, validated; every problem names the file and the key."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

    class Rule(BaseModel):
        model_config = ConfigDict(extra="forbid")
        device: str
        why: str = ""
        model: str | None = None  # the model this device serves, when not serve's own -m

        @field_validator("device")
        @classmethod
        def _device(cls, v: str) -> str:
            devices = route_devices()
            if v not in devices:
                raise ValueError(f"unknown device {v!r}; one of {', '.join(devices)}")
            return v

    class Policy(BaseModel):
        model_config = ConfigDict(extra="forbid")
        min_confidence: float = Field(ge=0, le=1)
        default: str
        classes: dict[str, Rule]

        @field_validator("default")
        @classmethod
        def _default(cls, v: str) -> str:
            return Rule._device(v)

        @field_validator("classes")
        @classmethod
        def _classes(cls, v: dict) -> dict:
            unknown = sorted(set(v) - {*CLASSES, LONG_DOC})
            if unknown:
                raise ValueError(f"unknown classes {unknown}; the classes are "
                                 f"{', '.join((*CLASSES, LONG_DOC))}")
            return v

    file = Path(path) if path else SHIPPED
    try:
        policy = Policy.model_validate(read_json(file))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        why = reasons(exc, "policy") if isinstance(exc, ValidationError) else str(exc)
        raise UsageError(f"--route-policy {file}: {why}") from None
    return {"min_confidence": policy.min_confidence, "default": policy.default,
            "classes": {k: {"device": r.device, "why": r.why, "model": r.model}
                        for k, r in policy.classes.items()}}


def pick_device(policy: dict, klass: str, confidence: float, available) -> tuple[str, str]:
    """(device, why) for a decision: the class's device, or the default when the confidence is
    under the floor, the class has no rule, or its device is not available here."""
    rule = policy["classes"].get(klass)
    default = policy["default"]
    if rule is None:
        return default, f"no rule for {klass}: default"
    if confidence < policy["min_confidence"]:
        return default, f"confidence {confidence:.2f} < {policy['min_confidence']}: default"
    if not available(rule["device"]):
        return default, f"{rule['device']} is not available here: default"
    return rule["device"], rule["why"]


def device_available(device: str) -> bool:
    from lemonade_onebit.backends import launcher_for

    cls = launcher_for(device)
    return cls is not None and cls().available()
