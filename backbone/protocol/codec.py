"""API message bodies <-> kio entities, by (API key, version).

kio generates one frozen dataclass per message and version from Kafka's JSON schemas. Its
reader is native code and fast; its writer is Python walking dataclass fields, several times
slower than decoding (see `ops/bench/codec_bench.py`). Hence: this module is the general path
for every API, the hot messages (Produce request, Produce and Fetch responses) have hand-written
paths in `backbone.wire.produce` and `backbone.wire.fetch`, and answers that rarely change
(Metadata) are worth caching as bytes by the broker.

Readers and writers are looked up once per (key, version, request/response) and cached.

Flexible versions are walked once against the schema (`_check_schema`) before kio reads them,
for two faults of kio 0.6.5's reader that matter to a broker facing untrusted bytes:

- It reserves memory for a compact array's announced length before reading any element; a
  forged length of 2**32 makes it ask for 32 GiB, and Rust aborts the whole process when that
  fails. The walk refuses any array longer than the bytes left.
- It raises KeyError on a tagged field it does not know, where the protocol says to skip it
  (that is how new optional fields reach old brokers). The walk cuts unknown tags out.

The walk merges runs of fixed-size fields and skips arrays of fixed-size structs element by
element, so it costs about as much as kio's own decoding. Non-flexible versions need neither
check (kio does not preallocate legacy arrays) and go straight to kio.

Every decode failure (truncation, bad lengths, invalid UTF-8) is raised as `MalformedMessage`
(an INVALID_REQUEST error); the cause is chained. Bytes after a request's last field are ignored,
as Kafka ignores them (librdkafka reserves room for array counts and leaves the spare bytes, e.g.
three after a null topics array in Metadata v12); a response must end where its schema does.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial.errors import SerialError
from kio.static.protocol import Entity as SchemaEntity

from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.framing import frame_prefix
from backbone.protocol.headers import (
    MalformedMessage,
    encode_request_header,
    encode_response_header,
    encode_uvarint,
    read_uvarint,
    response_header_version,
)

__all__ = [
    "decode_request",
    "decode_response",
    "encode",
    "encode_request_frame",
    "encode_response_frame",
    "request_type",
    "response_type",
]

Buffer = bytes | bytearray | memoryview
Entity = Any  # a kio payload dataclass; kio's own protocol types are not precise enough to help
EntityType = type[SchemaEntity]  # a kio payload class: its __version__ and __flexible__ are known


def _schema(load: Callable[[int, int], EntityType], kind: str, api_key: int, version: int) -> EntityType:
    try:
        return load(api_key, version)
    except (UnknownAPIKey, UnknownEntity) as error:
        raise UnsupportedVersionError(f"no {kind} schema for API {api_key} v{version}") from error


@cache
def request_type(api_key: int, version: int) -> EntityType:
    """The kio request class of this API version (raises UnsupportedVersionError if none)."""
    return _schema(load_request_schema, "request", api_key, version)


@cache
def response_type(api_key: int, version: int) -> EntityType:
    """The kio response class of this API version (raises UnsupportedVersionError if none)."""
    return _schema(load_response_schema, "response", api_key, version)


@cache
def _reader(entity_type: EntityType) -> Callable[[Buffer, int], tuple[Any, int]]:
    return entity_reader(entity_type)


@cache
def _writer(entity_type: EntityType) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(entity_type)


def _decode(entity_type: EntityType, buf: Buffer, pos: int, *, exact: bool) -> Entity:
    # kio's native reader refuses writable buffers; a read-only view costs no copy.
    view = memoryview(buf).cast("B").toreadonly()
    if pos > len(view):
        raise MalformedMessage("body starts past the end of the frame")
    try:
        # Only flexible versions have tagged fields and compact arrays (see _check_schema).
        data, start = _check_schema(entity_type, view, pos) if entity_type.__flexible__ else (view, pos)
        entity, size = _reader(entity_type)(data, start)
    except (SerialError, ValueError, KeyError, IndexError, struct.error) as error:
        raise MalformedMessage(f"cannot decode {entity_type.__qualname__}: {error}") from error
    if exact and start + size != len(data):
        raise MalformedMessage(
            f"{entity_type.__qualname__} v{entity_type.__version__} leaves "
            f"{len(data) - start - size} trailing bytes"
        )
    return entity


def decode_request(api_key: int, version: int, buf: Buffer, pos: int = 0) -> Entity:
    """The request body in `buf[pos:]` as a kio entity (bytes after its last field are ignored)."""
    return _decode(request_type(api_key, version), buf, pos, exact=False)


def decode_response(api_key: int, version: int, buf: Buffer, pos: int = 0) -> Entity:
    """The response body in `buf[pos:]` (exactly; trailing bytes are an error) as a kio entity."""
    return _decode(response_type(api_key, version), buf, pos, exact=True)


def encode(entity: Entity) -> bytes:
    """A kio request or response entity as body bytes (no header, no frame)."""
    out = io.BytesIO()
    entity_type: EntityType = type(entity)
    _writer(entity_type)(out, entity)
    return out.getvalue()


def encode_response_frame(correlation_id: int, entity: Entity) -> bytes:
    """Size prefix + response header (the version this API version uses) + body."""
    header = encode_response_header(
        correlation_id, response_header_version(entity.__api_key__, entity.__version__)
    )
    body = encode(entity)
    return frame_prefix(len(header) + len(body)) + header + body


def encode_request_frame(correlation_id: int, client_id: str | None, entity: Entity) -> bytes:
    """Size prefix + request header + body, as a client sends it."""
    header = encode_request_header(entity.__api_key__, entity.__version__, correlation_id, client_id)
    body = encode(entity)
    return frame_prefix(len(header) + len(body)) + header + body


# -- the schema walk: bounds, array sizes and unknown tags checked before kio reads -----------
#
# For every entity type a walker function is generated from kio's dataclass fields, in the way
# kafka-python compiles its codecs: straight-line code with runs of fixed-size fields merged into
# one addition and arrays of fixed-size structs skipped element by element, so checking a message
# costs about what kio spends decoding it. The generated source depends only on kio's schemas,
# never on input bytes. Reads beyond the end raise IndexError or struct.error (turned into
# MalformedMessage by `_decode`); skips beyond the end are caught by one check per struct.

_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = {"string": False, "bytes": True, "records": True}  # legacy length: int32 if True else int16

# Step kinds. A step is (kind, argument, is_array): a fixed size, whether a legacy length is an
# int32, or an entity type.
_FIXED, _VAR, _ENTITY, _NULLABLE_ENTITY = range(4)
_Step = tuple[int, Any, bool]
# An edit replaces buf[start:end] by new bytes: how unknown tagged fields are removed.
_Edit = tuple[int, int, bytes]
_Walker = Callable[[memoryview, int, list[_Edit]], int]


def _step(field: Field[Any], is_tag: bool) -> _Step:
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        # Nullable structs (KIP-893) carry an int8 marker, except as tagged fields.
        nullable = isinstance(kind, EntityField) and is_optional(field) and not is_tag
        return (_NULLABLE_ENTITY if nullable else _ENTITY, kind.type_, kind.is_array)
    assert isinstance(kind, PrimitiveField | PrimitiveTupleField)
    kafka_type = get_schema_field_type(field)
    if kafka_type in _FIXED_SIZES:
        return (_FIXED, _FIXED_SIZES[kafka_type], kind.is_array)
    if kafka_type in _VARIABLE:
        return (_VAR, _VARIABLE[kafka_type], kind.is_array)
    raise TypeError(f"field {field.name} has unknown type {kafka_type!r}")


def _steps(entity_type: EntityType) -> tuple[list[_Step], dict[int, _Step]]:
    """Untagged steps in wire order (adjacent fixed-size fields merged) and tag -> step."""
    steps: list[_Step] = []
    tags: dict[int, _Step] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            tags[tag] = _step(field, is_tag=True)
            continue
        step = _step(field, is_tag=False)
        if steps and step[0] == _FIXED and not step[2] and steps[-1][0] == _FIXED and not steps[-1][2]:
            steps[-1] = (_FIXED, steps[-1][1] + step[1], False)
        else:
            steps.append(step)
    return steps, tags


def _fixed_size(entity_type: EntityType) -> int | None:
    """The size of the untagged fields when all are fixed-size (a leaf struct), else None."""
    steps, _ = _steps(entity_type)
    if all(kind == _FIXED and not is_array for kind, _, is_array in steps):
        return sum(size for _, size, _ in steps)
    return None


class _Source:
    """Builds the source of one generated walker."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def bind(self, value: Any) -> str:
        name = f"_ref{len(self.names)}"
        self.names[name] = value
        return name

    def length(self, depth: int, target: str, wide: bool) -> None:
        """Read a length prefix into `target` (-1 for null)."""
        if self.flexible:
            self.add(depth, f"{target} = buf[pos]")
            self.add(depth, f"if {target} < 0x80: pos += 1")
            self.add(depth, f"else: {target}, pos = read_uvarint(buf, pos)")
            self.add(depth, f"{target} -= 1")
        else:
            fmt, size = ("INT32", 4) if wide else ("INT16", 2)
            self.add(depth, f"{target} = {fmt}(buf, pos)[0]; pos += {size}")

    def tags(self, depth: int, entity_type: EntityType) -> None:
        if self.flexible:
            self.add(depth, "if pos < len(buf) and buf[pos] == 0: pos += 1")
            self.add(depth, f"else: pos = walk_tags({self.bind(entity_type)}, buf, pos, edits)")

    def step(self, depth: int, step: _Step) -> None:
        kind, arg, is_array = step
        if is_array:
            self.length(depth, "count", wide=True)
            self.add(depth, "if count > len(buf) - pos: too_long(count, len(buf) - pos)")
            if kind == _FIXED:
                self.add(depth, f"if count > 0: pos += {arg} * count")
                return
            self.add(depth, "for _ in range(count):")
            depth += 1
        if kind == _FIXED:
            self.add(depth, f"pos += {arg}")
        elif kind == _VAR:
            self.length(depth, "size", wide=arg)
            self.add(depth, "if size > 0: pos += size")
        elif is_array and _fixed_size(arg) is not None:
            # Arrays of leaf structs (partitions, offsets...) make up most messages.
            self.add(depth, f"pos += {_fixed_size(arg)}")
            self.tags(depth, arg)
        else:
            if kind == _NULLABLE_ENTITY:
                self.add(depth, "marker = buf[pos]; pos += 1")  # int8: 0xff is -1, null
                self.add(depth, "if marker != 0xFF:")
                depth += 1
            self.add(depth, f"pos = {self.bind(_walker(arg))}(buf, pos, edits)")

    def compile(self, name: str) -> _Walker:
        namespace: dict[str, Any] = {
            "INT16": _INT16.unpack_from,
            "INT32": _INT32.unpack_from,
            "read_uvarint": read_uvarint,
            "walk_tags": _walk_tags,
            "too_long": _too_long,
            "overrun": _overrun,
            **self.names,
        }
        source = f"def {name}(buf, pos, edits):\n" + "\n".join(self.lines) + "\n    return pos\n"
        exec(compile(source, f"<walker {name}>", "exec"), namespace)
        walker: _Walker = namespace[name]
        return walker


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _too_long(count: int, left: int) -> None:
    raise MalformedMessage(f"array of {count} elements in {left} bytes")


def _overrun(name: str) -> None:
    raise MalformedMessage(f"{name} runs past the end of the message")


@cache
def _walker(entity_type: EntityType) -> _Walker:
    """The generated walker of `entity_type`: checks it from `pos`, returns the end position."""
    steps, _ = _steps(entity_type)
    source = _Source(entity_type.__flexible__)
    for step in steps:
        source.step(1, step)
    source.add(1, f"if pos > len(buf): overrun({source.bind(entity_type.__qualname__)})")
    source.tags(1, entity_type)
    return source.compile(f"walk_{entity_type.__name__}")


@cache
def _tag_walker(entity_type: EntityType, tag: int) -> _Walker | None:
    """A walker for the value of a known tagged field, None if the tag is unknown."""
    step = _steps(entity_type)[1].get(tag)
    if step is None:
        return None
    source = _Source(flexible=True)
    source.step(1, step)
    return source.compile(f"walk_{entity_type.__name__}_tag{tag}")


def _walk_tags(entity_type: EntityType, buf: memoryview, pos: int, edits: list[_Edit]) -> int:
    """Check a tagged-field section; record an edit if unknown tags must be cut out."""
    start = pos
    count, pos = read_uvarint(buf, pos)
    kept: list[bytes] = []
    changed = False
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise MalformedMessage("tagged field runs past the end of the message")
        walker = _tag_walker(entity_type, tag)
        if walker is None:
            changed = True  # unknown to our schema: dropped, as the protocol requires
        else:
            inner: list[_Edit] = []
            if walker(buf[:end], pos, inner) != end:
                raise MalformedMessage(f"tagged field {tag} does not fill its {size} bytes")
            value = _apply(buf, pos, end, inner) if inner else bytes(buf[pos:end])
            changed = changed or bool(inner)
            kept.append(encode_uvarint(tag) + encode_uvarint(len(value)) + value)
        pos = end
    if changed:
        edits.append((start, pos, encode_uvarint(len(kept)) + b"".join(kept)))
    return pos


def _apply(buf: memoryview, start: int, end: int, edits: list[_Edit]) -> bytes:
    parts: list[bytes | memoryview] = []
    for edit_start, edit_end, replacement in edits:
        parts += (buf[start:edit_start], replacement)
        start = edit_end
    parts.append(buf[start:end])
    return b"".join(parts)


def _check_schema(entity_type: EntityType, buf: memoryview, pos: int) -> tuple[memoryview | bytes, int]:
    """Walk the message as kio will; return it with unknown tags removed, and where it starts."""
    edits: list[_Edit] = []
    _walker(entity_type)(buf, pos, edits)
    if not edits:
        return buf, pos
    return _apply(buf, pos, len(buf), edits), 0
