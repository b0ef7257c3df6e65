"""The shared loader refuses hostile files quickly, with one line naming the file and the reason."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from activities.adapters.targets import TargetsError, load_targets
from common.loading import MAX_ALIASES, MAX_DEPTH, parse_json, parse_yaml
from workflows.request import RequestError, load_request

BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9)
)

HOSTILE: dict[str, tuple[bytes, str]] = {
    "alias bomb.yaml": (BOMB.encode(), "once YAML aliases are expanded"),
    "many aliases.yaml": (("a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n").encode(), "too many YAML aliases"),
    "recursive alias.yaml": (b"a: &a [*a]\n", "refers to a mapping or list that contains it"),
    "deep flow.yaml": (b"[" * 200 + b"]" * 200, "nested too deeply"),
    "deep block.yaml": ("".join(" " * i + "a:\n" for i in range(100)).encode() + b" " * 100 + b"x\n", "nested too deeply"),
    "deep sequence.yaml": (b"- " * 100_000 + b"x", "not valid YAML"),  # libyaml refuses past 1000 levels itself
    "deep alias.yaml": (("a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30).encode(), "nested too deeply"),
    "deep.json": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep65.json": (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested too deeply"),
    "binary.yaml": (bytes(range(256)), "not UTF-8 text"),
    "latin1.yaml": ("service: café".encode("latin-1"), "not UTF-8 text: invalid byte 0xe9 at byte offset 12"),
    "nul.yaml": (b"service: a\x00b", "not UTF-8 text: a NUL byte at byte offset 10"),
    "inf.json": (b'{"canary": {"analysis_minutes": 1e999}}', "1e999 is too large to be a number"),
    "nan.json": (b'{"canary": {"analysis_minutes": NaN}}', "NaN is not a number"),
    "neg infinity.json": (b'{"x": -Infinity}', "-Infinity is not a number"),
    "huge int.yaml": (b"x: " + b"9" * 5000, "an integer has more than 4300 digits"),
    "huge int.json": (b'{"x": ' + b"9" * 5000 + b"}", "an integer has more than 4300 digits"),
    "bad date.yaml": (b"freeze: 2026-13-45", "month must be in 1..12"),
    "python tag.yaml": (b"x: !!python/object/apply:os.system [echo hi]", "not valid YAML"),
    "unhashable key.yaml": (b"? [a, b]\n: 1\n", "not valid YAML"),
    "tabs.yaml": (b"a:\n\t- b", "not valid YAML"),
    "too large.yaml": (b"#" * ((1 << 20) + 1), "file too large: 1048577 bytes; the limit is 1 MiB"),
    "two documents.yaml": (b"a: 1\n---\nb: 2\n", "not valid YAML"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize(("load", "error"), [(load_request, RequestError), (load_targets, TargetsError)])
def test_hostile_files_are_refused_fast_with_one_line(tmp_path, name, load, error):
    content, expected = HOSTILE[name]
    path = tmp_path / name
    path.write_bytes(content)
    began = time.process_time()  # CPU time: a busy machine must not fail the test
    with pytest.raises(error) as info:
        load(path)
    assert time.process_time() - began < 1.0
    (problem,) = info.value.problems
    assert expected in problem, problem
    assert "\n" not in problem and len(problem) < 400
    assert str(path) in str(info.value)


def load_within(seconds: float, path: Path) -> None:
    """load_request(path) in a daemon thread (one that blocks for ever cannot hold the test run at exit); what it
    raised is raised here, and an AssertionError if it has not returned within `seconds`."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            load_request(path)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            outcome.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"load_request({path}) still blocks after {seconds} s"
    if outcome[0] is not None:
        raise outcome[0]


@pytest.mark.parametrize("special", ["directory", "missing", "fifo", "/dev/zero", "/dev/null", "no permission"])
def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path, special):
    path = {"directory": tmp_path, "missing": tmp_path / "missing.yaml", "fifo": tmp_path / "fifo.yaml",
            "/dev/zero": Path("/dev/zero"), "/dev/null": Path("/dev/null"), "no permission": tmp_path / "secret.yaml"}[special]
    if special == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    if special == "no permission":
        path.write_text("service: x\n")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: permissions do not apply")
    with pytest.raises(RequestError) as info:
        # a FIFO or device read would block for ever: the wait bound turns that into a failure, not a hung run
        load_within(120, path)
    (problem,) = info.value.problems
    assert problem.startswith("cannot read file: "), problem
    expected = {"directory": "a directory", "missing": "No such file", "fifo": "a FIFO", "/dev/zero": "a device",
                "/dev/null": "a device", "no permission": "Permission denied"}[special]
    assert expected in problem


def test_a_bom_and_crlf_line_ends_are_fine(tmp_path):
    good = Path("deploy/examples/request.yaml").read_bytes().replace(b"\n", b"\r\n")
    path = tmp_path / "windows.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + good)
    assert load_request(path).service == "payments"


def test_anchors_and_merge_keys_within_the_caps_still_work():
    data = parse_yaml("base: &w {days: [mon], start: '09:00'}\na: {<<: *w, end: '10:00'}\nb: [*w, *w]\n")
    assert isinstance(data, dict) and data["a"] == {"days": ["mon"], "start": "09:00", "end": "10:00"}


def test_json_numbers_stay_exact_and_finite():
    assert parse_json('{"a": 1e308, "b": -0.0, "c": 12345678901234567890}') == {"a": 1e308, "b": -0.0, "c": 12345678901234567890}


def test_the_examples_targets_file_loads():
    assert load_targets("deploy/examples/targets.yaml").targets
