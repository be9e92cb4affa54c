"""Lenient reading: a record dataclass read from a JSON document that may be damaged.

A document that fails its schema is still worth reading (a failure record with one extra field
still names the first cause), so nothing here trusts a type or raises on any value: a missing or
wrongly typed field reads as its default. The rules are written once, driven by each field's type:

| field type                       | reads as                                                       |
|----------------------------------|----------------------------------------------------------------|
| `str | None`, `int | None`, ...  | the value when it has that type (bool is no int), else None    |
| `float | None`                   | a finite number (an int too), else None                        |
| `str`                            | a non-empty string, else the default                           |
| `tuple[T, ...]`                  | the items that read as T, others dropped (any string is a str) |
| `tuple[T, ...] | None`           | every item read as T, else None (one bad item spoils it)       |
| `Mapping[str, T]`                | the entries whose value reads as T                             |
| `Mapping[str, Any]`, `dict[...]` | the object as is, else {} (a tuple of them keeps every item)   |
| `dict[str, Any] | None`          | the object, else None                                          |
| a record `R`, `R | None`         | `R` read from the object (from {} when it is none)             |

A field without a default is required: a record missing one reads as None (dropped from the
tuple or mapping that holds it). `doc_field` overrides a field's key, where it sits (`path`),
or its reading (`read`); `given` fields come from the caller (where the file was found), never
from the document. `read=as_written` keeps the value as written, for a finding that quotes it
(`items_as_written`: a list's items).

A field typed `T | None | Absent` with the default `ABSENT` tells an absent key (ABSENT) from
one present (read as `T | None`: an explicit null, or a wrong type, is None): for the readers
that decide on a key's presence (a registry written before gateways has no `upstream`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Self, TypeVar

__all__ = [
    "ABSENT",
    "Absent",
    "Lenient",
    "as_bool",
    "as_devices",
    "as_dict",
    "as_int",
    "as_list",
    "as_num",
    "as_str",
    "as_written",
    "decode",
    "decoder",
    "doc_field",
    "items_as_written",
    "nonempty_dict",
]

T = TypeVar("T")
Reader = Callable[[Any], Any]


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_num(v: Any) -> float | None:
    if type(v) is float:  # the common case first: asked ~25 times per rank
        return v if math.isfinite(v) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float (JSON allows 1e400 written out)
        return None
    return f if math.isfinite(f) else None


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def as_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_devices(v: Any) -> tuple[int, ...] | None:
    """Device indices: every item an int, else None."""
    if not isinstance(v, list):
        return None
    out = [d for d in v if as_int(d) is not None]
    return tuple(out) if len(out) == len(v) else None


def nonempty_dict(v: Any) -> dict[str, Any] | None:
    """An object with something in it, else None (an empty one says nothing)."""
    return v if isinstance(v, dict) and v else None


def as_written(v: Any) -> Any:
    """The value as written (a field that a finding quotes, whatever its type)."""
    return v


def items_as_written(v: Any) -> tuple[Any, ...]:
    """A list's items as written, whatever their types (a finding names them, or their index)."""
    return tuple(as_list(v))


class Absent(enum.Enum):
    """The key is not in the document (a one-member enum: mypy narrows `x is ABSENT`)."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT


def _text(v: Any) -> str | None:
    # A str field that must name something: the empty string is as good as missing.
    return v if isinstance(v, str) and v else None


_SCALARS: dict[Any, Reader] = {int: as_int, float: as_num, str: as_str, bool: as_bool}
# The same rules as statements on a value `v` (decode's generated code uses them in place of a call).
_INLINE: dict[Reader, str] = {
    as_str: "if not isinstance({v}, str): {v} = None",
    _text: "if not isinstance({v}, str) or not {v}: {v} = None",
    as_int: "if not isinstance({v}, int) or isinstance({v}, bool): {v} = None",
    as_bool: "if not isinstance({v}, bool): {v} = None",
    as_dict: "if not isinstance({v}, dict): {v} = {{}}",
    # A finite float is read as itself: only another value asks as_num (an int, a bool, NaN, ...).
    as_num: "if type({v}) is not float or not isfinite({v}): {v} = as_num({v})",
}


@dataclass(frozen=True)
class _Spec:
    """How one field is read (doc_field's arguments)."""

    key: str | None = None
    path: tuple[str, ...] = ()
    read: Reader | None = None
    given: bool = False


_META = "schemas.lenient"


def doc_field(
    *,
    key: str | None = None,
    path: tuple[str, ...] = (),
    read: Reader | None = None,
    given: bool = False,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A record field read from `key` (default: its name) of the object at `path`, by `read`
    (default: its type's reader); `given`: the caller supplies it (decode's keyword arguments)."""
    return dataclasses.field(default=default, metadata={_META: _Spec(key, path, read, given)})


class _Field(NamedTuple):
    # A tuple, unpacked in decode's loop: the audit reads thousands of ranks' records.
    name: str
    key: str
    path: tuple[str, ...]
    read: Reader
    given: bool
    default: Any  # the value when it reads as None (_REQUIRED: none, the record is unreadable)
    factory: bool  # default is called for each record (a mutable default)
    keyed: bool  # ABSENT when the key is missing, None when present but unreadable


_REQUIRED = object()
_NONE: Mapping[str, Any] = {}  # a nested record's given fields: none


def decode(cls: type[T], doc: object, **given: Any) -> T | None:
    """`cls` read from `doc`; None when `doc` is no object or a required field reads as nothing."""
    # The ignore: mypy does not take a TypeVar's class for Hashable (every class is).
    return _decoder(cls)(doc, given)  # type: ignore[arg-type, no-any-return]


def decoder(cls: type[T]) -> Callable[[object, Mapping[str, Any]], T | None]:
    """`cls`'s decoder: `decoder(cls)(doc, given)` is `decode(cls, doc, **given)`, for a reader of
    many records of one type (no lookup and no keyword arguments per record)."""
    return _decoder(cls)  # type: ignore[arg-type]


@functools.cache
def _decoder(cls: type[Any]) -> Callable[..., Any]:
    """`cls`'s decoder, written out once per record type from its fields (as dataclasses writes
    __init__): the audit decodes thousands of ranks' records, and a loop that asks every field
    how it is read took about 1.4 times as long (a 1024-replica run's records). Field by field:

    - a `given` field comes from the caller; any other is `read` from `key` of the object at `path`;
    - a keyed field (default ABSENT) is ABSENT when the key is missing, None when it is unreadable;
    - an unreadable field takes its default (a factory's new value), and a required one, which has
      none, makes the whole record unreadable (None).
    """
    scope: dict[str, Any] = {"cls": cls, "ABSENT": ABSENT, "none": _NONE}
    scope.update(as_dict=as_dict, as_num=as_num, isfinite=math.isfinite)
    body = ["    if not isinstance(doc, dict):", "        return None"]
    objects: dict[tuple[str, ...], str] = {(): "doc"}
    values = []
    for i, f in enumerate(_fields(cls)):  # type: ignore[arg-type]
        value = f"v{i}"
        values.append(value)
        if f.given:
            body.append(f"    {value} = given.get({f.name!r})")
        else:
            where = objects.get(f.path)
            if where is None:
                where = objects[f.path] = f"o{len(objects)}"
                walk = "doc"
                for step in f.path:
                    walk = f"as_dict({walk}.get({step!r}))"
                body.append(f"    {where} = {walk}")
            inline = _INLINE.get(f.read)
            if inline is None:
                scope[f"read{i}"] = f.read
                body.append(f"    {value} = read{i}({where}.get({f.key!r}))")
            else:  # the common readers written out: a call per field of every rank's records is most of the decoding
                body += [f"    {value} = {where}.get({f.key!r})", "    " + inline.format(v=value)]
            if f.keyed:
                body.append(f"    if {value} is None and {f.key!r} not in {where}:")
                body.append(f"        {value} = ABSENT")
                continue
        if f.default is _REQUIRED:
            body += [f"    if {value} is None:", "        return None"]
        elif f.default is not None:
            scope[f"default{i}"] = f.default
            body += [f"    if {value} is None:", f"        {value} = default{i}{'()' if f.factory else ''}"]
    if _plain(cls):
        # A frozen dataclass's __init__ sets each field through object.__setattr__ (a call per
        # field of every rank's records); its instance dict filled at once holds the same values.
        scope["new"] = object.__new__
        names = (f.name for f in _fields(cls))  # type: ignore[arg-type]
        items = ", ".join(f"{n!r}: {v}" for n, v in zip(names, values, strict=True))
        body += ["    record = new(cls)", f"    record.__dict__.update({{{items}}})"]
        body.append("    return record")
    else:
        body.append(f"    return cls({', '.join(values)})")
    exec("def decode(doc, given=none):\n" + "\n".join(body), scope)  # noqa: S102 - our own text, from the fields
    # (doc, given): `given` defaults to none (a nested record's decoder is called with its object alone).
    decoder: Callable[..., Any] = scope["decode"]
    return decoder


def _plain(cls: type[Any]) -> bool:
    """Whether `cls`'s __init__ only stores its fields: a dataclass whose every field it takes, with
    no __post_init__ and an instance dict (no __slots__)."""
    return (
        dataclasses.is_dataclass(cls)
        and not hasattr(cls, "__post_init__")
        and "__slots__" not in cls.__dict__
        and all(f.init for f in dataclasses.fields(cls))
    )


class Lenient:
    """A record readable from a possibly damaged document (see the module's table)."""

    @classmethod
    def from_json(cls, doc: object, **given: Any) -> Self | None:
        return decode(cls, doc, **given)


@functools.cache
def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    # Once per record type: the audit reads thousands of ranks' records.
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META, _Spec())
        factory = f.default_factory is not dataclasses.MISSING
        default = f.default_factory if factory else f.default
        keyed = default is ABSENT
        read = spec.read or _reader(_without_absent(hints[f.name]) if keyed else hints[f.name])
        key = spec.key or f.name
        out.append(
            _Field(
                f.name,
                key,
                spec.path,
                read,
                spec.given,
                _REQUIRED if default is dataclasses.MISSING else default,
                factory,
                keyed,
            )
        )
    return tuple(out)


def _without_absent(tp: Any) -> Any:
    """`T | None | Absent` as `T | None`: the type a present key reads as."""
    return functools.reduce(operator.or_, (a for a in typing.get_args(tp) if a is not Absent))


def _reader(tp: Any) -> Reader:
    """The reader for a field's type (the module's table)."""
    args = typing.get_args(tp)
    if _is_optional(tp):
        (inner,) = (a for a in args if a is not type(None))
        return _optional_reader(inner)
    if tp in _SCALARS:
        return _text if tp is str else _SCALARS[tp]
    origin = typing.get_origin(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        readable = _readable(_reader_of_item(args[0]))

        def readable_items(v: Any) -> tuple[Any, ...]:
            return readable(v) if isinstance(v, list) else ()

        return readable_items
    if origin in (dict, Mapping):
        if args[1] is Any:
            return as_dict
        entry = _reader_of_item(args[1])
        return lambda v: {str(k): x for k, x in ((k, entry(e)) for k, e in as_dict(v).items()) if x is not None}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _record_reader(tp)
    raise TypeError(f"no lenient reader for {tp!r}")


def _optional_reader(tp: Any) -> Reader:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        readable = _readable(_reader_of_item(args[0]))

        def all_or_none(v: Any) -> tuple[Any, ...] | None:
            if not isinstance(v, list):
                return None
            out = readable(v)
            return out if len(out) == len(v) else None

        return all_or_none
    if origin is dict and args[1] is Any:
        return lambda v: v if isinstance(v, dict) else None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _record_reader(tp)
    raise TypeError(f"no lenient reader for {tp!r} | None")


def _reader_of_item(tp: Any) -> Reader:
    # An item of a tuple or a value of a mapping: any string counts (an empty one is still an item).
    return as_str if tp is str else _reader(tp)


def _readable(item: Reader) -> Callable[[list[Any]], tuple[Any, ...]]:
    """The items of a list that `item` reads as something, in order."""
    # A list comprehension, not a generator: one call per list, not one per item. The common
    # item readers written as a test in place: a call per item was most of the time of reading
    # every rank's device indices and names.
    if item is as_str:
        return lambda v: tuple([x for x in v if isinstance(x, str)])
    if item is as_int:
        return lambda v: tuple([x for x in v if isinstance(x, int) and not isinstance(x, bool)])
    return lambda v: tuple([x for x in map(item, v) if x is not None])


def _record_reader(cls: type[Any]) -> Reader:
    # The nested record's decoder, bound once: it is asked for every item of every rank's records.
    read = _decoder(cls)  # type: ignore[arg-type]
    if any(f.default is _REQUIRED for f in _fields(cls)):  # type: ignore[arg-type]
        # A record with a required field reads as nothing from {}, as its decoder reads any value
        # that is no object: the decoder itself, without a call in between.
        return read
    return lambda v: read(v if isinstance(v, dict) else {})


def _is_optional(tp: Any) -> bool:
    return isinstance(tp, types.UnionType) and type(None) in typing.get_args(tp)
