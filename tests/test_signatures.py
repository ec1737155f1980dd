"""Signatures and result fingerprints: canonical args, keyed args_hash, fingerprints."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig
from otelguard.core.signatures import canonical_args
from otelguard.testing import RecordingObserver

KEY = "test-signature-key"
HEX16 = re.compile(r"^[0-9a-f]{16}$")

# JSON values without floats/bools, so that Python equality and JSON equality agree (1 == 1.0 == True).
json_scalars = st.none() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


def args_hash(args: Any, key: str = KEY, tool: str = "probe") -> str:
    """The args_hash a fresh guard with signature ``key`` gives ``args`` (as its observers see it)."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=key), observers=(recorder,))
    guard.start_turn()
    guard.before_call(tool, args)
    return recorder.call_starts[-1].signature.args_hash


def reorder(value: Any) -> Any:
    """The same value with every mapping's insertion order reversed, at every depth."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


# -- canonical arguments -------------------------------------------------------------------------


def test_canonical_args_is_compact_sorted_utf8_json() -> None:
    """Canonical arguments: compact JSON, keys sorted at every level, UTF-8 (not ASCII-escaped)."""
    args = {"b": 1, "a": [1, {"d": 2, "c": "é ☃"}], "A": None}
    assert canonical_args(args) == '{"A":null,"a":[1,{"c":"é ☃","d":2}],"b":1}'.encode()


@given(json_objects)
def test_canonicalisation_is_key_order_invariant(args: dict[str, Any]) -> None:
    """Canonical bytes do not depend on the insertion order of keys, at any depth."""
    assert canonical_args(reorder(args)) == canonical_args(args)


@given(json_objects)
def test_json_string_args_equal_the_mapping(args: dict[str, Any]) -> None:
    """A JSON string of the arguments (any key order, any whitespace) canonicalises like the mapping."""
    assert canonical_args(json.dumps(reorder(args), indent=2)) == canonical_args(args)
    assert canonical_args(json.dumps(args, separators=(",", ":"))) == canonical_args(args)


def test_none_is_the_empty_mapping() -> None:
    """args None canonicalises like {} (and like the JSON string "{}")."""
    assert canonical_args(None) == canonical_args({}) == canonical_args("{}") == canonical_args(" { } ")


@pytest.mark.parametrize(
    ("text", "value"),
    [("[1, 2]", [1, 2]), ("5", 5), ("true", True), ('[{"b": 1, "a": 2}]', [{"a": 2, "b": 1}])],
)
def test_json_string_lists_and_scalars_canonicalise_as_that_value(text: str, value: Any) -> None:
    """JSON-string args that parse to a list or scalar are canonicalised as that value."""
    assert canonical_args(text) == canonical_args(value)


@pytest.mark.parametrize("raw", ["not json {", "rm -rf /tmp/x", "{'single': 'quotes'}", "\ud800 broken"])
def test_unparsable_string_is_hashed_raw(raw: str) -> None:
    """A string that does not parse as JSON is used raw (and lone surrogates do not raise)."""
    assert canonical_args(raw) == raw.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(
    "args",
    [
        {"a": "\ud800"},
        {"\udfff": 1},
        ["\ud83d", "ok"],
        {"nested": {"x": ["\udc80" * 3]}},
        "\ud800",
    ],
)
def test_lone_surrogates_never_raise_and_are_deterministic(args: Any) -> None:
    """Lone surrogates never raise; the same input always gives the same bytes."""
    first = canonical_args(args)
    assert isinstance(first, bytes)
    assert canonical_args(args) == first


def test_lone_surrogates_are_distinguished() -> None:
    """Different lone surrogates give different canonical bytes."""
    assert canonical_args({"a": "\ud800"}) != canonical_args({"a": "\ud801"})


def test_non_json_values_are_stringified_deterministically() -> None:
    """Non-JSON values (sets, bytes, objects) are stringified; the same input gives the same bytes."""

    class Thing:
        def __str__(self) -> str:
            return "thing"

    args = {"s": {3, 1, 2}, "b": b"\x00\xff", "o": Thing(), "t": (1, 2), "k": {1: "int key"}}
    assert canonical_args(args) == canonical_args(dict(reversed(list(args.items()))))
    assert canonical_args({"s": {1, 2, 3}}) == canonical_args({"s": frozenset([3, 2, 1])})


def test_set_canonicalisation_is_stable_across_processes() -> None:
    """The same input always gives the same bytes, even across processes with different hash seeds."""
    code = "from otelguard.core.signatures import canonical_args; print(canonical_args({'s': {'a','b','c','d','e'}}).hex())"
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(proc.stdout.strip())
    assert len(outputs) == 1


# -- args_hash -----------------------------------------------------------------------------------


def test_args_hash_is_16_hex() -> None:
    """args_hash is the first 16 hex characters of a keyed hash."""
    assert HEX16.match(args_hash({"path": "README.md"}))
    assert HEX16.match(args_hash(None))


def test_args_hash_is_keyed_not_a_plain_hash() -> None:
    """A plain unkeyed hash of a short argument is reversible by guessing: args_hash must be keyed."""
    canonical = canonical_args({"q": "x"})
    plain = {
        hashlib.sha256(canonical).hexdigest()[:16],
        hashlib.blake2b(canonical).hexdigest()[:16],
        hashlib.blake2b(canonical, digest_size=8).hexdigest(),
        hashlib.md5(canonical).hexdigest()[:16],
        hashlib.sha1(canonical).hexdigest()[:16],
    }
    assert args_hash({"q": "x"}) not in plain


@given(json_objects, json_objects)
def test_args_hash_differs_for_different_args(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Different arguments give different args_hash values."""
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (args_hash(a) == args_hash(b)) is same


@given(json_objects)
def test_args_hash_is_key_order_and_json_string_invariant(args: dict[str, Any]) -> None:
    """The mapping, its reordering and its JSON string all give one args_hash."""
    expected = args_hash(args)
    assert args_hash(reorder(args)) == expected
    assert args_hash(json.dumps(reorder(args), indent=1)) == expected


def test_args_hash_distinguishes_key_names() -> None:
    """Arguments that differ only in a key name hash differently."""
    assert args_hash({"a": 1}) != args_hash({"b": 1})
    assert args_hash({"path": "x"}) != args_hash({"file": "x"})


def test_args_hash_none_equals_empty_mapping() -> None:
    """None and {} have the same args_hash."""
    assert args_hash(None) == args_hash({}) == args_hash("{}")


def test_args_hash_differs_for_different_signature_keys() -> None:
    """The same arguments hash differently under different signature keys."""
    assert args_hash({"q": "x"}, key="key-one") != args_hash({"q": "x"}, key="key-two")


def test_args_hash_is_stable_for_one_key() -> None:
    """Two guards with the same signature key give the same hash (hashes correlate across processes)."""
    assert args_hash({"q": "x"}, key="shared") == args_hash({"q": "x"}, key="shared")


def test_signature_names_the_tool() -> None:
    """Decision.signature is (tool_name, args_hash), a named tuple."""
    guard = Guard(GuardConfig(signature_key=KEY))
    guard.start_turn()
    for _ in range(2):
        guard.before_call("read_file", {"path": "a"})
        decision = guard.after_call("read_file", {"path": "a"}, "same", failed=False)
    signature = decision.signature
    assert decision.code == "no_progress_warn"
    assert signature is not None
    assert signature.tool_name == "read_file"
    assert HEX16.match(signature.args_hash)
    assert tuple(signature) == ("read_file", signature.args_hash)


def test_reused_arg_objects_do_not_reuse_a_stale_hash() -> None:
    """A per-call cache must not hand a later call the hash of an earlier, different call."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    args = {"q": 1}
    guard.before_call("probe", args)
    guard.after_call("probe", args, "ok", failed=False)
    args["q"] = 2
    guard.before_call("probe", args)
    guard.after_call("probe", args, "ok", failed=False)
    first, second = recorder.calls
    assert first.signature != second.signature
    assert second.signature.args_hash == args_hash({"q": 2})
    # Temporaries freed between calls get their ids reused; hashes must still follow the content.
    recorder.clear()
    for i in range(200):
        guard.before_call("probe", {"q": i})
        guard.after_call("probe", {"q": i}, "ok", failed=False)
    assert len({event.signature.args_hash for event in recorder.calls}) == 200


def test_env_signature_key_is_used_when_config_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTELGUARD_SIGNATURE_KEY is the key when the config has no signature_key; the config's wins."""
    monkeypatch.setenv("OTELGUARD_SIGNATURE_KEY", "env-key")
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(), observers=(recorder,))
    guard.start_turn()
    guard.before_call("probe", {"q": 1})
    env_hash = recorder.call_starts[-1].signature.args_hash
    assert env_hash == args_hash({"q": 1}, key="env-key")
    assert args_hash({"q": 1}, key="config-key") != env_hash


def test_env_key_correlates_across_processes() -> None:
    """With OTELGUARD_SIGNATURE_KEY set, two processes give the same args_hash."""
    code = (
        "from otelguard import Guard; from otelguard.testing import RecordingObserver; "
        "r = RecordingObserver(); g = Guard(observers=(r,)); g.start_turn(); g.before_call('probe', {'q': [1, 'x']}); "
        "print(r.call_starts[-1].signature.args_hash)"
    )
    env = {**os.environ, "OTELGUARD_SIGNATURE_KEY": "fleet-key"}
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == args_hash({"q": [1, "x"]}, key="fleet-key")


def test_a_random_key_differs_between_processes_and_a_bare_guard_says_nothing() -> None:
    """With no key configured, one random key per process is used; a guard that exports nothing says
    nothing about it (the hashes never leave the process)."""
    code = (
        "import logging, io\n"
        "stream = io.StringIO(); logging.basicConfig(stream=stream, level=logging.WARNING)\n"
        "from otelguard import Guard\n"
        "from otelguard.testing import RecordingObserver\n"
        "ra, rb = RecordingObserver(), RecordingObserver()\n"
        "a = Guard(observers=(ra,)); a.start_turn(); b = Guard(observers=(rb,)); b.start_turn()\n"
        "a.before_call('probe', {'q': 1}); b.before_call('probe', {'q': 1})\n"
        "ha = ra.call_starts[-1].signature.args_hash\n"
        "hb = rb.call_starts[-1].signature.args_hash\n"
        "print(ha == hb, ha)\n"
        "print(len(stream.getvalue().splitlines()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OTELGUARD_SIGNATURE_KEY"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    for same_in_process, _hash, log_lines in runs:
        assert same_in_process == "True"
        assert log_lines == "0"
    assert runs[0][1] != runs[1][1], "a random key differs between processes"


def test_no_warning_when_a_key_is_configured(caplog: pytest.LogCaptureFixture) -> None:
    """A configured signature key logs no random-key warning."""
    with caplog.at_level(logging.WARNING, logger="otelguard"):
        guard = Guard(GuardConfig(signature_key=KEY))
        guard.start_turn()
        guard.before_call("probe", {"q": 1})
    assert not [r for r in caplog.records if "random" in r.getMessage()]


# -- result fingerprints (through no_progress: same read call, same answer again) ---------------


def same_fingerprint(first: Any, second: Any, **config: Any) -> bool:
    """True when a read call returning ``first`` then ``second`` counts as "same answer again"."""
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, **config}))
    guard.start_turn()
    for result in (first,):
        guard.before_call("read_file", {"path": "a"})
        guard.after_call("read_file", {"path": "a"}, result, failed=False)
    guard.before_call("read_file", {"path": "a"})
    decision = guard.after_call("read_file", {"path": "a"}, second, failed=False)
    return decision.code == "no_progress_warn"


@given(json_objects)
def test_fingerprint_ignores_key_order_and_whitespace(result: dict[str, Any]) -> None:
    """JSON results compare by content: key order and whitespace do not matter."""
    assert same_fingerprint(json.dumps(result), json.dumps(reorder(result), indent=3))


@pytest.mark.parametrize(
    "key", ["duration_seconds", "duration_ms", "elapsed", "timestamp", "execution_count"]
)
def test_fingerprint_ignores_default_volatile_keys_at_any_depth(key: str) -> None:
    """Default volatile_result_keys are ignored, at the top level and nested in objects and lists."""
    assert same_fingerprint(json.dumps({"rows": [1], key: 1}), json.dumps({"rows": [1], key: 2}))
    nested_a = {"data": {"items": [{"id": 1, key: 0.5}], key: "t1"}}
    nested_b = {"data": {"items": [{"id": 1, key: 9.5}], key: "t2"}}
    assert same_fingerprint(json.dumps(nested_a), json.dumps(nested_b))


def test_fingerprint_sees_real_changes() -> None:
    """A change outside the volatile keys is a different result."""
    assert not same_fingerprint(
        json.dumps({"rows": [1], "timestamp": 1}), json.dumps({"rows": [2], "timestamp": 1})
    )
    nested_a = {"data": {"items": [{"id": 1, "elapsed": 1}]}}
    nested_b = {"data": {"items": [{"id": 2, "elapsed": 1}]}}
    assert not same_fingerprint(json.dumps(nested_a), json.dumps(nested_b))


def test_configured_volatile_keys_replace_the_defaults() -> None:
    """volatile_result_keys replaces the default list: the new keys are ignored, the old ones count."""
    config = {"volatile_result_keys": ["nonce"]}
    assert same_fingerprint('{"a": 1, "nonce": 1}', '{"a": 1, "nonce": 2}', **config)
    assert not same_fingerprint('{"a": 1, "timestamp": 1}', '{"a": 1, "timestamp": 2}', **config)


def test_text_results_compare_as_text() -> None:
    """Non-JSON results compare as text."""
    assert same_fingerprint("line one\nline two", "line one\nline two")
    assert not same_fingerprint("line one\nline two", "line one\nline  two")
    assert not same_fingerprint("abc", "abd")


def test_large_results_are_fingerprinted_by_content() -> None:
    """100 KB results: an identical copy is the same answer, one changed byte is not."""
    body = {"rows": [{"id": i, "name": f"row-{i}", "elapsed": i} for i in range(2500)]}
    text = json.dumps(body)
    assert len(text) > 100_000
    changed = dict(body, rows=[*body["rows"][:-1], {"id": -1, "name": "row-x", "elapsed": 0}])
    assert same_fingerprint(text, json.dumps(body, indent=1))
    assert not same_fingerprint(text, json.dumps(changed))
    big_text = "x" * 100_000
    assert same_fingerprint(big_text, "x" * 100_000)
    assert not same_fingerprint(big_text, "x" * 99_999 + "y")


def test_surrogates_in_results_do_not_raise() -> None:
    """Results with lone surrogates are fingerprinted without raising."""
    assert same_fingerprint("bad \ud800 text", "bad \ud800 text")
    assert same_fingerprint('{"a": "\\ud800"}', '{"a": "\\ud800"}')


def test_keys_that_stringify_alike_do_not_make_order_matter() -> None:
    """{1: .., "1": ..} hashes the same whatever the insertion order (ties broken by key type)."""
    assert canonical_args({1: "a", "1": "b"}) == canonical_args({"1": "b", 1: "a"})


def test_sets_nested_thousands_deep_do_not_raise() -> None:
    nested: frozenset[object] = frozenset()
    for _ in range(5_000):
        nested = frozenset([nested])
    assert canonical_args({"s": nested}).startswith(b'{"s":[')


def test_a_tuple_chain_thousands_deep_in_arguments_is_hashed_without_ending_the_process() -> None:
    """A tuple nested a few thousand deep: orjson 3.12 and 3.13 serialise tuples with no depth limit
    and abort the whole process (a double free) instead of raising; the guard must hash it and the
    agent loop go on. Run in a child process, which an abort would end."""
    script = (
        "import otelguard\n"
        "chain = ()\n"
        "for _ in range(5_000):\n"
        "    chain = (chain,)\n"
        "guard = otelguard.Guard()\n"
        "print(guard.before_call('tool', {'a': chain}).action)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "allow"), done.stderr[-500:]


# -- a JSON string and the value it encodes hash alike -------------------------------------------

# Any JSON-able value: every string (lone surrogates included), every integer (past 64 bits too),
# finite floats, and the non-string keys json.dumps accepts. A top-level string is left out: a
# string argument is read as JSON text, so it is not "the value it encodes".
_any_text = st.text(alphabet=st.characters(codec=None), max_size=12)
_any_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _any_text
)
_any_key = _any_text | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
_any_value = st.recursive(
    _any_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_any_key, inner, max_size=4),
    max_leaves=12,
)


def _json_keys_unique(value: Any) -> bool:
    """False when two keys of one mapping are written alike by json.dumps (1 and "1")."""
    if isinstance(value, dict):
        written = {json.dumps({key: None}) for key in value}
        return len(written) == len(value) and all(_json_keys_unique(v) for v in value.values())
    if isinstance(value, list):
        return all(_json_keys_unique(v) for v in value)
    return True


@given(_any_value.filter(lambda v: not isinstance(v, str)).filter(_json_keys_unique))
def test_a_json_string_hashes_like_the_value_it_encodes(value: Any) -> None:
    """hash(value) == hash(json.dumps(value)) for any JSON-able value, and neither raises."""
    expected = args_hash(value)
    assert HEX16.match(expected)
    assert args_hash(json.dumps(value)) == expected
    assert args_hash(json.dumps(value, ensure_ascii=False)) == expected
    assert args_hash(json.dumps(value).encode()) == expected


def test_lone_surrogate_argument_hashes_like_its_json_string() -> None:
    """{"q": "\\ud800"} and json.dumps of it give the same args_hash (orjson refuses the escape)."""
    assert args_hash({"q": "\ud800"}) == args_hash(json.dumps({"q": "\ud800"}))
    assert args_hash({"q": "\ud800"}) != args_hash({"q": "\ud801"})


def test_integers_past_64_bits_hash_exactly_from_json_text() -> None:
    """An integer past 64 bits in JSON text is read exactly, not as a float: neighbours differ."""
    big = 2**64 + 1
    assert args_hash(json.dumps({"n": big})) == args_hash({"n": big})
    assert args_hash(json.dumps({"n": big})) != args_hash(json.dumps({"n": big + 1}))
    assert args_hash("[-9223372036854775809]") == args_hash([-(2**63) - 1])


def test_exponents_in_numbers_and_in_strings_keep_parity() -> None:
    """Floats with exponents and strings that merely contain "e+" hash like their JSON text."""
    for value in ({"x": 1e300, "y": -2.5e16}, {"q": "coffee+tea 3e+4"}, [1e22, "v1e+5", 2**70]):
        assert args_hash(json.dumps(value)) == args_hash(value)
