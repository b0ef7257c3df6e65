"""Reading a request or targets file that may be hostile: bounded size, UTF-8 text, bounded YAML and JSON.

The one place in `common/` that touches the file system: the request (workflows/) and the targets file
(activities/adapters/) share it, and neither may import the other. Every problem becomes one line in the
caller's own `FileProblems` error, so `bifrost plan` on any file answers with a reason and never a traceback.
"""

from __future__ import annotations

import gc
import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from common.problems import FileProblems, shorten

MAX_BYTES = 1 << 20  # 1 MiB: a request is a few kilobytes; Temporal refuses payloads over 2 MB
MAX_DEPTH = 64  # nesting levels of mappings and lists; a request needs 5
MAX_ALIASES = 100  # YAML alias uses (`*name`) in one file
MAX_NODES = 200_000  # YAML values after expanding aliases; a 1 MiB file without aliases has at most ~500 k


class LoadProblem(ValueError):
    """Why a file's bytes cannot become data, in one line (the caller adds the file name)."""


# -- bytes -----------------------------------------------------------------------------------------
def read_text(path: str | Path, max_bytes: int = MAX_BYTES) -> str:
    """The file's text; refuses what is not a regular file, is larger than `max_bytes` or is not UTF-8."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise LoadProblem(f"cannot read file: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoadProblem(f"cannot read file: it is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise LoadProblem(f"file too large: {info.st_size} bytes; the limit is {_size(max_bytes)}")
        chunks, size = [], 0
        while size <= max_bytes:  # the file may grow while we read: never take more than the limit
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise LoadProblem(f"cannot read file: {err.strerror or err}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise LoadProblem(f"file too large: more than {_size(max_bytes)}")
    return decode_text(data)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def decode_text(data: bytes) -> str:
    """UTF-8 text without NUL bytes (a leading byte-order mark is dropped), else "not UTF-8 text" with the offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LoadProblem(f"not UTF-8 text: invalid byte 0x{data[err.start]:02x} at byte offset {err.start}") from None
    nul = text.find("\0")
    if nul >= 0:
        offset = len(text[:nul].encode("utf-8"))
        raise LoadProblem(f"not UTF-8 text: a NUL byte at byte offset {offset} (is it a binary file?)")
    return text.removeprefix("\ufeff")


# -- YAML ------------------------------------------------------------------------------------------
# libyaml's parser is about 10x faster than PyYAML's own; both compose the same node graph
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BoundedSafeLoader(_Base):  # type: ignore[misc]  # PyYAML ships no types: its loaders are Any
    """The safe loader, refusing more than MAX_ALIASES aliases, MAX_NODES expanded values or MAX_DEPTH levels.

    The check runs on the composed node graph, before any Python object is built, so an alias bomb is
    refused after reading its few hundred bytes rather than expanded.
    """

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_graph(node)
        return node


def _check_graph(root: yaml.Node) -> None:
    """Walk the graph once (a node reached twice is an alias); bound aliases, expanded size and depth, without recursion."""
    size: dict[int, int] = {}  # id(node) -> values it stands for once aliases are expanded
    height: dict[int, int] = {}  # id(node) -> levels from it down to its deepest value
    on_path: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            if size[key] > MAX_NODES:
                raise LoadProblem(f"too many values: more than {MAX_NODES} once YAML aliases are expanded (an alias bomb?)")
            continue
        if key in on_path:
            raise LoadProblem("a YAML alias refers to a mapping or list that contains it")
        if key in size:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise LoadProblem(f"too many YAML aliases: more than {MAX_ALIASES} uses of `*name`")
            if depth + height[key] - 1 > MAX_DEPTH:
                raise LoadProblem(f"nested too deeply: more than {MAX_DEPTH} levels of mappings and lists")
            continue
        if depth > MAX_DEPTH:
            raise LoadProblem(f"nested too deeply: more than {MAX_DEPTH} levels of mappings and lists")
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(node)
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(node))


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """Refuse a mapping that names a key twice: a reviewer reads the first, a loader keeps the last."""
    first: dict[tuple[str, str], yaml.Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key_node.tag, key_node.value)
        if ident in first:
            raise LoadProblem(f"duplicate key {shorten(repr(key_node.value), 80)} on line "
                              f"{first[ident].start_mark.line + 1} and line {key_node.start_mark.line + 1}; "
                              "keep one (Bifrost would use the last, a reader sees the first)")
        first[ident] = key_node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


@contextmanager
def _no_gc() -> Iterator[None]:
    """Building hundreds of thousands of objects with the cyclic GC on is quadratic (measured: 40 k keys 3 s, off 0.4 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_yaml(text: str) -> object:
    """One YAML document, safely; every failure is a LoadProblem."""
    try:
        with _no_gc():
            return yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except LoadProblem:
        raise
    except yaml.MarkedYAMLError as err:
        raise LoadProblem(f"not valid YAML: {_yaml_reason(err)}") from None
    except yaml.YAMLError as err:
        raise LoadProblem(f"not valid YAML: {shorten(str(err), 200)}") from None
    except RecursionError:
        raise LoadProblem(f"nested too deeply: more than {MAX_DEPTH} levels of mappings and lists") from None
    except Exception as err:  # noqa: BLE001 - PyYAML's constructors: a 5000-digit int, 2026-13-45, `!!float ''`
        raise LoadProblem(f"not valid YAML: a value cannot be read: {_value_reason(err)}") from None


def _value_reason(err: Exception) -> str:
    text = str(err)
    if "integer string conversion" in text:
        return "an integer has more than 4300 digits"
    return shorten(text, 200)


def _yaml_reason(err: yaml.MarkedYAMLError) -> str:
    where = err.problem_mark or err.context_mark
    what = " ".join(p for p in (err.context, err.problem) if p)
    at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
    return shorten(what or "syntax error", 200) + at


# -- JSON ------------------------------------------------------------------------------------------
def _no_constant(name: str) -> float:
    raise LoadProblem(f"not valid JSON: {name} is not a number; give a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise LoadProblem(f"not valid JSON: {shorten(text, 40)} is too large to be a number; give a finite number")
    return value


class _DuplicateKey(Exception):
    def __init__(self, key: str, start: int | None = None) -> None:
        super().__init__(key)
        self.key, self.start = key, start


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _duplicate_json_key(text: str) -> str:
    """The problem line for a JSON text known to repeat a key in some object: the key and both lines.

    Run only after the fast decoder found a duplicate: the pure-Python scanner tells where each object starts."""
    starts: list[int] = []
    decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        try:
            return _unique_pairs(pairs)
        except _DuplicateKey as dup:
            raise _DuplicateKey(dup.key, starts[-1]) from None

    def parse_object(s_and_end: tuple[str, int], *args: Any) -> Any:
        starts.append(s_and_end[1] - 1)
        try:
            return json.decoder.JSONObject(s_and_end, *args)  # type: ignore[attr-defined]
        finally:
            starts.pop()

    decoder.object_pairs_hook = pairs_hook
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
    except (ValueError, RecursionError):
        pass
    except _DuplicateKey as dup:
        if dup.start is not None:
            lines = [text.count("\n", 0, at) + 1 for at in _key_offsets(text, dup.start, dup.key, decoder)]
            if len(lines) >= 2:
                return (f"duplicate key {shorten(repr(dup.key), 80)} on line {lines[0]} and line {lines[1]}; keep one "
                        "(Bifrost would use the last, a reader sees the first)")
        return f"duplicate key {shorten(repr(dup.key), 80)}; keep one (Bifrost would use the last, a reader sees the first)"
    return "duplicate key; keep one"


def _key_offsets(text: str, start: int, key: str, decoder: json.JSONDecoder) -> list[int]:
    """Where `key` appears as a key of the object that starts at `start` (its own keys only, not nested ones)."""
    ws = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]
    scan = json.scanner.py_make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
    out: list[int] = []
    i = ws(text, start + 1).end()
    while i < len(text) and text[i] == '"' and len(out) < 2:
        k, j = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        if k == key:
            out.append(i)
        j = ws(text, ws(text, j).end() + 1).end()  # past the colon
        try:
            _, j = scan(text, j)
        except (ValueError, StopIteration, RecursionError):
            break
        j = ws(text, j).end()
        if j < len(text) and text[j] == ",":
            j = ws(text, j + 1).end()
        i = j
    return out


def parse_json(text: str) -> object:
    """One JSON document with finite numbers only, no key twice in an object, nested at most MAX_DEPTH levels;
    every failure is a LoadProblem."""
    try:
        with _no_gc():
            data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs)
    except LoadProblem:
        raise
    except _DuplicateKey:
        raise LoadProblem(f"not valid JSON: {_duplicate_json_key(text)}") from None
    except json.JSONDecodeError as err:
        raise LoadProblem(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise LoadProblem(f"nested too deeply: more than {MAX_DEPTH} levels of objects and arrays") from None
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        raise LoadProblem(f"not valid JSON: a value cannot be read: {_value_reason(err)}") from None
    if _depth_exceeds(data, MAX_DEPTH):
        raise LoadProblem(f"nested too deeply: more than {MAX_DEPTH} levels of objects and arrays")
    return data


def _depth_exceeds(data: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


# -- files -----------------------------------------------------------------------------------------
def parse_document(text: str, json_format: bool) -> object:
    """JSON or YAML text to data."""
    return parse_json(text) if json_format else parse_yaml(text)


def load_document(path: str | Path, error: type[FileProblems]) -> object:
    """Read `path` (JSON if it ends in .json, else YAML) and decode it; any problem raises `error` naming the file."""
    p = Path(path)
    try:
        return parse_document(read_text(p), p.suffix.lower() == ".json")
    except LoadProblem as problem:
        raise error(shorten(str(p), 300), [str(problem)]) from None
