"""Strict readers for configuration from the environment (12-factor)."""

import os
from typing import overload

from django.core.exceptions import ImproperlyConfigured


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def _within(name: str, number, value: str, minimum, maximum):
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        bounds = " and ".join(
            f"{word} {bound:g}" for word, bound in (("at least", minimum), ("at most", maximum)) if bound is not None
        )
        raise ImproperlyConfigured(f"{name} must be {bounds}, not {value!r}")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None
    return _within(name, number, value, minimum, maximum)


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    return _within(name, number, value, minimum, maximum)


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
