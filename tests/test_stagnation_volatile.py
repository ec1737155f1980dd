"""The volatile parts of a result, in every common shape: a loop whose output carries a duration, an
id, a port, a size, a byte count or a date that moves from run to run is still the same loop.

For each shape: any output with any value of the shape in it normalises as with any other value of
that shape (property tests), and a failing check (``stagnation``) or a passing one
(``unchanged_check``) that prints one, rerun after each of 100 edits, is stopped."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard.core.detectors.stagnation import normalised
from otelguard.testing import ScriptStep, run_script
from tests.test_detectors import make_guard

# -- the shapes ---------------------------------------------------------------------------------

small = st.integers(min_value=0, max_value=59)
digits = st.integers(min_value=0, max_value=999)


def _go(hours: int, minutes: int, seconds: int, fraction: int, form: int) -> str:
    """A duration as Go prints one (time.Duration.String), in one of its forms."""
    return [
        f"{hours + 1}h{minutes}m{seconds}s",
        f"{minutes + 1}m{seconds}.{fraction}s",
        f"{seconds}.{fraction}s",
        f"{fraction + 1}ms",
        f"{fraction + 1}.{seconds}µs",
        f"{fraction + 1}ns",
    ][form]


durations = st.one_of(
    st.builds(_go, small, small, small, digits, st.integers(min_value=0, max_value=5)),
    st.builds(lambda h, m, s: f"{h:02d}:{m:02d}:{s:02d}", st.integers(0, 99), small, small),
    st.builds(lambda m, s, f: f"{m}:{s:02d}.{f:03d}", small, small, digits),
    st.builds(lambda n, unit: f"{n} {unit}", digits, st.sampled_from(["seconds", "second", "ms", "minutes"])),
)
uuids = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
hex_ids = st.binary(min_size=4, max_size=32).map(bytes.hex) | st.binary(min_size=4, max_size=32).map(
    lambda b: b.hex().upper()
)
HOSTS = (
    "localhost:{}",
    "127.0.0.1:{}",
    "0.0.0.0:{}",
    "[::1]:{}",
    "http://127.0.0.1:{}/",
    "db.internal:{}",
    "port {}",
)
port_numbers = st.integers(min_value=1, max_value=65535)
sizes = st.builds(
    lambda n, f, space, unit: f"{n}.{f}{space}{unit}",
    digits,
    st.integers(0, 9),
    st.sampled_from(["", " "]),
    st.sampled_from(["B", "KB", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "K", "M", "G"]),
).filter(lambda v: not v.endswith((" K", " M", " G")))
byte_counts = st.builds(lambda n: f"{n:,} bytes", st.integers(0, 10**12)) | st.builds(
    lambda n: f"{n} bytes", st.integers(0, 10**12)
)
DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%fZ",
    "%Y-%m-%d %H:%M:%S,%f",
    "%Y/%m/%d %H:%M",
    "%d/%m/%Y",
    "%m/%d/%Y, %I:%M:%S %p",
    "%d.%m.%Y %H:%M",
    "%a, %d %b %Y %H:%M:%S GMT",
    "%a %b %e %H:%M:%S UTC %Y",
    "%b %e %H:%M:%S",
    "%b %d, %Y",
    "%B %d, %Y",
    "%d %B %Y",
    "%d %b %Y %H:%M",
    "%d-%b-%Y %H:%M:%S",
    "%A %d %B %Y",
    "[%d/%b/%Y:%H:%M:%S +0000]",
)
moments = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2099, 12, 31))


def _pairs(values: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, str]]:
    return st.tuples(values, values)


SHAPES: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "duration": _pairs(durations),
    "uuid": _pairs(uuids),
    "hex id": _pairs(hex_ids),
    # a port, in one host's form (the host is not volatile)
    "port": st.sampled_from(HOSTS).flatmap(
        lambda host: st.tuples(port_numbers.map(host.format), port_numbers.map(host.format))
    ),
    "size": _pairs(sizes),
    "byte count": _pairs(byte_counts),
}

# any output around the value: words, punctuation and lines, as a tool prints them
output = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(["\n", " ", "\t"]),
    max_size=60,
)


def _around(before: str, value: str, after: str) -> str:
    return f"{before} {value} {after}"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_any_value_of_a_shape_normalises_as_any_other(shape: str) -> None:
    @given(output, SHAPES[shape], output)
    def check(before: str, values: tuple[str, str], after: str) -> None:
        one, other = values
        assert normalised(_around(before, one, after)) == normalised(_around(before, other, after))

    check()


@given(output, st.sampled_from(DATE_FORMATS), moments, moments, output)
def test_any_date_normalises_as_any_other_in_its_format(
    before: str, form: str, one: datetime, other: datetime, after: str
) -> None:
    assert normalised(_around(before, one.strftime(form), after)) == normalised(
        _around(before, other.strftime(form), after)
    )


def test_names_and_counts_that_are_not_volatile_stay() -> None:
    """What tells two results apart stays: a test's name and number, a word, the failure itself."""
    assert normalised("FAILED test_3") != normalised("FAILED test_4")
    assert normalised("KeyError: 'size'") != normalised("KeyError: 'name'")
    assert normalised("expected a decade") != normalised("expected a facade")
    assert "defaced" in normalised("the page was defaced at 10:00")


# -- the loops ----------------------------------------------------------------------------------


def _uuid(i: int) -> str:
    return str(uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15 % (1 << 128)))


EXAMPLES: dict[str, Callable[[int], str]] = {
    "go duration": lambda i: f"{i % 3 + 1}m{i % 60}.{i % 10}s",
    "clock duration": lambda i: f"00:{i % 60:02d}:{(7 * i) % 60:02d}",
    "uuid from a digit": lambda i: "3" + _uuid(i)[1:],
    "uuid from a letter": lambda i: "f" + _uuid(i)[1:],
    "hex id from a letter": lambda i: f"c0ffee{i * 7919:08x}",
    "port": lambda i: f"127.0.0.1:{40000 + 37 * i}",
    "size": lambda i: [f"{i}.5 MB", f"{i * 3}KiB", f"{i}.2GB"][i % 3],
    "byte count": lambda i: f"{1000 + 997 * i:,} bytes",
    "date": lambda i: datetime(2026, 1 + i % 12, 1 + i % 28, i % 24, i % 60).strftime(
        "%a, %d %b %Y %H:%M:%S"
    ),
}


def _loop(value: Callable[[int], str], failed: bool) -> list[ScriptStep]:
    """The check rerun after each of 100 edits, its output the same but for one volatile value."""
    guard = make_guard(mode="unattended", hard_stop=None)
    script: list[tuple[Any, ...]] = []
    for i in range(100):
        printed = f"running check (took {value(i)})\nTraceback (most recent call last):\nKeyError: 'size'\n"
        script.append(("execute_bash", {"command": "python reproduce.py"}, printed, failed))
        script.append(("str_replace_editor", {"path": "lib.py", "new_str": f"fix {i}"}, "edited", False))
    return run_script(guard, script)


def _stopped(steps: list[ScriptStep]) -> bool:
    return any(step.decision.should_halt or step.before.action == "block" for step in steps)


@pytest.mark.parametrize("shape", sorted(EXAMPLES))
@pytest.mark.parametrize("failed", [True, False], ids=["stagnation", "unchanged_check"])
def test_a_loop_printing_a_volatile_value_is_stopped(shape: str, failed: bool) -> None:
    steps = _loop(EXAMPLES[shape], failed)
    assert _stopped(steps[:60]), [s.decision.code for s in steps]
    codes = {step.decision.code for step in steps}
    assert any(code.startswith("stagnation_") for code in codes)


@pytest.mark.parametrize(
    ("one", "other"), [("26:19.583", "14h5m44s"), ("16:44:03", "36.37µs"), ("9:08.053", "925 second")]
)
def test_a_word_after_any_duration_is_read_alike(one: str, other: str) -> None:
    """``am`` after a clock time is its half of the day; after a duration of another shape it is taken
    the same way, so the word that follows a value never tells two runs apart."""
    assert normalised(_around("", one, "am")) == normalised(_around("", other, "am"))
