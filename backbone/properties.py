"""Typed configuration properties with Kafka's names, read from a properties or TOML file.

Every room that takes configuration (broker, log, client, mirror) declares its keys as `Property` specs;
`resolve` turns raw strings into typed values and stops at the first bad or unknown key with a message
that names the key and says what is allowed. stdlib only, so any room may import it.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and what to do."""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


_PARSERS: dict[type, Callable[[str], Any]] = {
    int: int,
    float: float,
    str: str,
    bool: parse_bool,
    list: parse_list,
}


@dataclass(frozen=True)
class Property:
    """One configuration key: its type, default, allowed range or choices, and a line of help."""

    name: str
    type: type
    default: Any = None
    doc: str = ""
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False

    def parse(self, raw: Any) -> Any:
        if isinstance(raw, str):
            try:
                value = _PARSERS[self.type](raw)
            except ValueError as exc:
                raise ConfigError(f"{self.name}={raw!r} is not a valid {self.type.__name__}: {exc}") from None
        elif self.type is float and isinstance(raw, int) and not isinstance(raw, bool):
            value = float(raw)
        elif self.type is list and isinstance(raw, (list, tuple)):
            value = [str(item) for item in raw]
        elif isinstance(raw, self.type) and not (self.type is int and isinstance(raw, bool)):
            value = raw
        else:
            raise ConfigError(f"{self.name}={raw!r} must be a {self.type.__name__}")
        return self.check(value)

    def check(self, value: Any) -> Any:
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}={value} is below the minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}={value} is above the maximum {self.maximum}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name}={value!r} must be one of: {', '.join(self.choices)}")
        return value


def _unknown_key_message(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown configuration key {key!r}{hint}"


def resolve(
    specs: Mapping[str, Property],
    raw: Mapping[str, Any],
    *,
    allow_unknown: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Typed values for every spec (defaults filled in); an unknown or bad key raises ConfigError.

    `allow_unknown` may accept keys the specs do not list (for example a room that passes a family of
    keys on to another room).
    """
    values: dict[str, Any] = {}
    for key, value in raw.items():
        spec = specs.get(key)
        if spec is None:
            if allow_unknown is not None and allow_unknown(key):
                continue
            raise ConfigError(_unknown_key_message(key, specs))
        values[key] = spec.parse(value)
    for name, spec in specs.items():
        if name not in values:
            if spec.required:
                raise ConfigError(f"{name} is required: {spec.doc}" if spec.doc else f"{name} is required")
            values[name] = spec.default
    return values


def read_properties_file(path: str | Path) -> dict[str, Any]:
    """Read a Java-style `.properties` file, or a TOML file (by its `.toml` suffix), into a flat dict.

    TOML tables flatten with dots (`[log] dirs = "..."` is `log.dirs`), so both files use Kafka's names.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    if path.suffix == ".toml":
        try:
            return _flatten(tomllib.loads(text))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return parse_properties(text, source=str(path))


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse `key=value` (or `key: value`) lines; `#` and `!` start comments; a trailing `\\` continues."""
    result: dict[str, str] = {}
    pending = ""
    for number, line in enumerate(text.splitlines(), start=1):
        line = pending + line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        separators = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not separators:
            raise ConfigError(f"{source}:{number}: expected key=value, got {line!r}")
        split = min(separators)
        result[line[:split].strip()] = line[split + 1 :].strip()
    return result


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """`--override key=value` arguments from the command line."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like key=value")
        result[key.strip()] = value.strip()
    return result
