"""Config sections on pydantic: one model per section, unknown keys refused, every error one line.

A section is a frozen dataclass validated by pydantic (``@section("steering")``):
building one, from a YAML mapping or in code, checks every value, and a bad
one raises ``ConfigError`` with the dotted key (``steering.max_instances must
be >= 1 (got 0)``), never pydantic's multi-line report. Values are quoted
through ``shown``, and the inline secrets (``SECRET_FIELDS``) never, so no
error line holds a secret.

The YAML rules that pydantic's own types do not have are kept here, in one
place for every section: a bool is ``true``/``false`` and nothing else, a
number is finite and below ``LARGEST``, a whole number may be written 5.0 but
not 5.5, and every ``*_s`` setting is a duration (>= 0).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import numbers
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, dataclass_transform, get_args, get_origin, get_type_hints

import pydantic
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from wire_daemon.core.errors import ConfigError
from wire_daemon.core.secrets import shown

T = TypeVar("T")

LARGEST = 10**18  # beyond any count or duration a setting holds, and still exact as a float's order of magnitude
# The only secrets a config may hold (the inline opt-ins): their values are never quoted.
SECRET_FIELDS = frozenset({"token", "admin_key"})
_PRICES_FROM_CONFIG = (
    "this cloud reads no prices from itself; its prices come from the config: "
    "steering.price_per_hour, or the price (and spot_price) of each steering.instance_types entry"
)
# Keys one setting owns, and where it lives: given in a cloud section, they are refused with this.
ELSEWHERE = {
    "slots_per_instance": "the slot count is steering.slots_per_instance",
    "slots": "the slot count is steering.slots_per_instance",
    "cloud": "it is cloud.kind",
    "pool": "it is cloud.pool",
    "spot_prices": _PRICES_FROM_CONFIG,
    "spot_price_refresh_s": _PRICES_FROM_CONFIG,
}
# Keys that moved, and where to.
MOVED = {"safety.charging_unit_s": "steering.charging_unit_s (the one charging unit)"}

# The bounds most settings have.
Positive = Field(gt=0)
AtLeastZero = Field(ge=0)
AtLeastOne = Field(ge=1)

_CONFIG = ConfigDict(extra="forbid", hide_input_in_errors=True, revalidate_instances="never")
_ADAPTERS: dict[type, TypeAdapter[Any]] = {}
_RULES = "_yaml_rules"  # the class attribute that carries the YAML rules to pydantic
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt")}
_BOUNDS |= {"less_than_equal": ("<=", "le")}


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, pydantic.Field))
def section(key: str) -> Callable[[type[T]], type[T]]:
    """A frozen pydantic dataclass for the config section ``key`` (``""``: the whole file)."""

    def make(cls: type[T]) -> type[T]:
        setattr(cls, _RULES, field_validator("*", mode="before")(_scalar))  # pydantic collects it from the class
        model: Any = pydantic.dataclasses.dataclass(frozen=True, config=_CONFIG)(cls)
        model.__config_key__ = key
        validate = model.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                validate(self, *args, **kwargs)
            except ValidationError as exc:
                raise config_error(exc, type(self), key, kwargs.get("source", "")) from None
            except ConfigError as exc:  # a check across keys; the whole file's settings name the file
                if not kwargs.get("source"):
                    raise
                raise ConfigError(f"{kwargs['source']}: {exc}") from None

        model.__init__ = __init__
        return model

    return make


def parse(cls: type[T], raw: Any, source: str, key: str | None = None) -> T:
    """``cls`` from a YAML mapping (or ``cls`` itself); every error one line naming ``source`` and the key."""
    key = config_key(cls) if key is None else key
    where = f"{source}: " if source else ""
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}{key} must be a mapping")
    try:
        return _adapter(cls).validate_python(raw)
    except ValidationError as exc:
        raise config_error(exc, cls, key, source) from None
    except ConfigError as exc:  # a check across keys names its keys itself
        raise ConfigError(f"{where}{exc}") from None


def _adapter(cls: type) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def config_key(cls: type) -> str:
    return str(getattr(cls, "__config_key__", ""))


def check(condition: bool, message: str) -> None:
    """A check across keys of one section: ``message`` names them."""
    if not condition:
        raise ConfigError(message)


def one_of(*choices: str) -> Any:
    """A string field that takes one of ``choices``."""

    def chosen(value: str) -> str:
        if value not in choices:
            raise PydanticCustomError("config", "must be one of {choices} (got {got})", _ctx(choices, value))
        return value

    return pydantic.AfterValidator(chosen)


def _ctx(choices: tuple[str, ...], value: Any) -> dict[str, str]:
    return {"choices": ", ".join(choices), "got": repr(value) if isinstance(value, str) else shown(value)}


# -- the YAML rules, before pydantic's own ----------------------------------------------


def _scalar(cls: type, value: Any, info: ValidationInfo) -> Any:
    name = info.field_name or ""
    return _checked(_hints(cls)[name], value, name)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=False)


def _checked(kind: Any, value: Any, name: str) -> Any:
    args = get_args(kind)
    if type(None) in args:  # Optional[X]: null is allowed
        return None if value is None else _checked(next(a for a in args if a is not type(None)), value, name)
    origin = get_origin(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return value if isinstance(value, (dict, kind)) else _fail("must be a mapping")
    if origin is dict:
        if not isinstance(value, dict):
            _fail("must be a mapping")
        if args == (str, str) and not all(isinstance(v, str) for v in [*value, *value.values()]):
            _fail("must map strings to strings (e.g. tags)")
        return value
    if origin is tuple and dataclasses.is_dataclass(args[0]):  # a list of mappings (steering.instance_types)
        return value if isinstance(value, (list, tuple)) else _fail("must be a list of mappings (got {got})", value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            _fail("must be a list of strings (got {got})", value, name)
        return tuple(value)
    if kind is bool:
        return value if isinstance(value, bool) else _fail("must be true or false (got {got})", value, name)
    if kind in (int, float):
        return _number(kind, value, name)
    if kind is str and isinstance(value, datetime.date):  # YAML read an unquoted timestamp: the text it was
        return value.isoformat()
    if kind is str and isinstance(value, bool):  # YAML 1.1: unquoted on/off/yes/no are booleans
        words = "on, yes or true" if value else "off, no or false"
        _fail(f"must be a string (got {{got}}): YAML read an unquoted {words} as {str(value).lower()}; quote it", value)
    if kind is str and not isinstance(value, str):
        _fail("must be a string (got {got})", value, name)
    return value


def _number(kind: type, value: Any, name: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail("must be a number (got {got})", value, name)
    if not math.isfinite(value):  # YAML's .nan and .inf: every comparison misleads
        _fail("must be a finite number (got {got})", value)
    if abs(value) > LARGEST:
        _fail(f"is too large (more than {LARGEST:.0e})")
    if kind is int and not float(value).is_integer():
        _fail("must be a whole number (got {got})", value)
    if name.endswith("_s") and value < 0:  # every *_s setting is a duration in seconds
        _fail("is a duration: it must be >= 0 (got {got})", value)
    return kind(value)


def _fail(message: str, value: Any = None, name: str = "") -> Any:
    got = "a value that is not shown" if name in SECRET_FIELDS else _quoted(value)
    raise PydanticCustomError("config", message, {"got": got})


def _quoted(value: Any) -> str:
    """A value as an error line quotes it: a number as written (5 for 5.0), anything else through ``shown``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return shown(value)
    whole = isinstance(value, float) and value.is_integer() and abs(value) < LARGEST
    return repr(int(value)) if whole else repr(value)


# -- pydantic's report, as one line ------------------------------------------------------------


def config_error(exc: ValidationError, cls: type, key: str, source: str = "") -> ConfigError:
    """The first of pydantic's errors as one line naming the key; all missing keys of one section together."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] in _UNKNOWN]
    first = (unknown or errors)[0]  # an unknown key first: it is often a misspelt required one
    loc = first["loc"]
    where = dotted(key, loc)
    kind = first["type"]
    if kind == "missing":
        names = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == loc[:-1]]
        text = f"{dotted(key, loc[:-1]) or 'the file'} is missing required key(s): {', '.join(names)}"
    elif kind in _UNKNOWN:
        text = _unknown(cls, key, loc)
    elif kind in _BOUNDS:
        sign, bound = _BOUNDS[kind]
        text = f"{where} must be {sign} {_quoted(first.get('ctx', {}).get(bound))} (got {_got(first, loc)})"
    elif kind == "string_too_short":
        text = f"{where} is required"
    elif kind == "config":
        text = f"{where} {first['msg']}"
    elif kind in ("dataclass_type", "dataclass_args_type", "dict_type"):
        text = f"{where} must be a mapping"
    else:  # a type pydantic refused that the rules above let through: its words, never the value
        text = f"{where} has a value that cannot be used ({first['msg']})"
    return ConfigError(f"{source}: {text}" if source else text)


def dotted(key: str, loc: tuple[int | str, ...]) -> str:
    """``steering`` + (``instance_types``, 0, ``cores``) -> ``steering.instance_types[0].cores``."""
    out = key
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _got(error: ErrorDetails, loc: tuple[int | str, ...]) -> str:
    value = error.get("input")
    if loc and loc[-1] in SECRET_FIELDS:
        return "a value that is not shown"
    return _quoted(value)


def _unknown(cls: type, key: str, loc: tuple[int | str, ...]) -> str:
    where = dotted(key, loc)
    if where in MOVED:
        return f"{where} is no longer a setting: use {MOVED[where]}"
    name = str(loc[-1])
    if name in ELSEWHERE and where.startswith("cloud."):
        return f"{where} cannot be set here: {ELSEWHERE[name]}"
    parent = _class_at(cls, loc[:-1])
    known = [f.name for f in dataclasses.fields(parent) if f.name not in getattr(parent, "__config_hidden__", ())]
    more = getattr(parent, "__config_more__", ())
    known += more() if callable(more) else more
    return f"unknown key {where} (known: {', '.join(known)})"


def _class_at(cls: Any, loc: tuple[int | str, ...]) -> Any:
    """The section class at ``loc`` below ``cls`` (a list index steps into the list's element class)."""
    for part in loc:
        kind = _hints(cls)[part] if isinstance(part, str) else cls
        args = get_args(kind)
        cls = args[0] if get_origin(kind) is tuple else next((a for a in args if a is not type(None)), kind)
    return cls
