"""A delegation tree carried from service to service in ``baggage``: it stays one tree at any depth,
its size limit is in bytes, a bad tree is named for what is wrong with it, no value ever reaches a
log, and ``extract``/``inject`` add to the caller's context and headers instead of replacing them."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, context, trace

from otelguard import Guard, GuardConfig, propagation
from otelguard.core import decisions as codes
from otelguard.core.tree import DelegationTree, parse_tree, read_tree_values
from otelguard.core.tree_identity import MAX_DEPTH_CARRIED
from tests.e2e import stop_process
from tests.test_cli_serve import Serve
from tests.test_sidecar_state import start_replica, stderr_of

KEY = "propagation-key"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SECRET = "s3cr3t-v4lue"


def config(max_depth: int, searches: int) -> GuardConfig:
    return GuardConfig.from_mapping(
        {
            "signature_key": KEY,
            "caps": {"on_hit": "reject", "tree": {"web_search": searches}},
            "delegation": {"max_depth": max_depth},
        }
    )


def service_chain(cfg: GuardConfig, services: int) -> list[Guard]:
    """``services`` services, each handling a request from the one before: it extracts the headers the
    one before injected and makes its own guard (a session of its own) inside them."""
    chain = [Guard(cfg, session_id=f"conversation-{uuid.uuid4().hex}", agent="service-1")]
    for n in range(2, services + 1):
        headers: dict[str, str] = {}
        propagation.inject(headers, chain[-1])
        with propagation.extract(headers):
            chain.append(Guard(cfg, session_id=f"request-{uuid.uuid4().hex}", agent=f"service-{n}"))
    return chain


def place(guard: Guard) -> DelegationTree:
    tree = guard.delegation_tree
    assert tree is not None
    return tree


# -- a tree at any depth ---------------------------------------------------------------------------


@pytest.mark.parametrize("max_depth", [4, 0])
def test_a_chain_of_services_deeper_than_max_depth_stays_one_tree(max_depth: int) -> None:
    services = max_depth + 4
    chain = service_chain(config(max_depth, searches=services), services)
    root = place(chain[0]).root
    assert [place(g).root for g in chain] == [root] * services  # no service roots a tree of its own
    assert [place(g).depth for g in chain] == list(range(services))
    assert all(len(place(g).path) <= max_depth + 1 for g in chain)
    # the tree's budget counts every service: one search each, then the tree is spent for all
    assert [g.before_call("web_search", {"q": n}).code for n, g in enumerate(chain)] == ["allow"] * services
    for guard in (chain[0], chain[-1]):
        refused = guard.before_call("web_search", {"q": "one more"})
        assert (refused.code, refused.count, refused.limit) == (codes.CAP_TREE, services, services)
    # a spawn is allowed above max_depth, refused at it and at every depth below it
    spawns = [g.before_call("Task", {"prompt": "go"}) for g in chain]
    assert [d.code for d in spawns[:max_depth]] == ["allow"] * max_depth
    assert [d.code for d in spawns[max_depth:]] == [codes.DELEGATION_DEPTH] * (services - max_depth)
    assert spawns[-1].count == services - 1 and spawns[-1].limit == max_depth


def test_a_tree_survives_any_length_of_chain_its_depth_carried_at_most_99() -> None:
    chain = service_chain(config(0, searches=0), MAX_DEPTH_CARRIED + 5)
    assert {place(g).root for g in chain} == {place(chain[0]).root}
    assert place(chain[-1]).depth == MAX_DEPTH_CARRIED
    assert place(chain[-1]).path == place(chain[0]).path
    assert chain[-1].before_call("Task", {"prompt": "go"}).code == codes.DELEGATION_DEPTH


def test_a_path_cut_at_the_senders_limit_is_a_tree_a_path_longer_than_its_depth_is_forged() -> None:
    root, one, two = "c" * 32, "0" * 12, "1" * 12
    assert parse_tree(root, "7", f"{one},{two}") == DelegationTree(root, 7, (one, two))
    assert parse_tree(root, "1", one) == DelegationTree(root, 1, (one,))  # a sender with max_depth 0
    assert read_tree_values(root, "0", f"{one},{two}") == "forged depth"
    assert read_tree_values(root, "100", one) == "malformed"
    assert read_tree_values(root, "1", "") == "malformed"
    assert read_tree_values(root, "1", ",".join([one] * 34)) == "malformed"  # longer than any max_depth
    # below a cut path, no agent is added after the gap
    cut = DelegationTree(root, 7, (one, two))
    assert cut.child("2" * 12, 32) == DelegationTree(root, 8, (one, two))


# -- bad baggage: each reason its own message, no value in any log ----------------------------------


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first header ignored for each reason is logged once a process: start from none logged."""
    monkeypatch.setattr(propagation, "_logged", set(), raising=False)


def tree_entries(depth: str = "0", path: str = "0123456789ab", root: str = "a" * 32) -> str:
    return f"otelguard.tree={root},otelguard.depth={depth},otelguard.path={path}"


@pytest.mark.parametrize(
    ("header", "wording"),
    [
        (
            tree_entries("0", "0123456789ab%2Cba9876543210"),
            "its depth is lower than its path bears out (a forged depth)",
        ),
        (tree_entries(root=SECRET), "an otelguard entry is missing or not of its form"),
        (tree_entries(path=f"planner-{SECRET}"), "an otelguard entry is missing or not of its form"),
        (f"{tree_entries()},pad={SECRET * 3000}", "the header is over 32768 bytes, too large to read"),
    ],
)
def test_each_reason_to_ignore_a_tree_has_its_own_message_without_any_value(
    header: str, wording: str, fresh_log: None, caplog: pytest.LogCaptureFixture
) -> None:
    before = propagation.ignored_baggage()
    with caplog.at_level(logging.DEBUG), propagation.extract({"baggage": header}) as tree:
        assert tree is None
    assert propagation.ignored_baggage() == before + 1
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "delegation tree" in m] == [
        f"otelguard ignored the delegation tree in a baggage header: {wording}. The request is served "
        "outside any tree; later headers ignored for this reason are only counted"
    ]
    assert not any(SECRET in m or "0123456789ab" in m or "a" * 32 in m for m in messages)


class _ReadOnlyHeaders(dict[str, str]):
    def __setitem__(self, key: str, value: str) -> None:
        raise TypeError(f"read-only headers, not {value}")


def test_a_header_that_cannot_be_written_is_counted_and_said_so_without_the_error_text(
    fresh_log: None, caplog: pytest.LogCaptureFixture
) -> None:
    guard = Guard(config(4, searches=5), session_id=f"conversation-{uuid.uuid4().hex}")
    before = propagation.ignored_baggage()
    with caplog.at_level(logging.DEBUG):
        propagation.inject(_ReadOnlyHeaders(), guard)  # never raises into the call
    assert propagation.ignored_baggage() == before + 1
    assert [r.getMessage() for r in caplog.records] == [
        "otelguard could not write the delegation tree into a baggage header (TypeError); the request "
        "goes without it; later failures of this kind are only counted"
    ]


def test_baggage_over_8192_bytes_keeps_its_intact_tree_and_logs_no_value(
    fresh_log: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Under 8192 characters, over 8192 UTF-8 bytes: OpenTelemetry would drop the header whole and log
    it raw. The tree in it still counts; the others' entries are dropped (as OpenTelemetry drops them)
    and nothing of the header reaches a log."""
    cfg = config(4, searches=2)
    caller = Guard(cfg, session_id=f"conversation-{uuid.uuid4().hex}", agent="planner")
    headers: dict[str, str] = {}
    propagation.inject(headers, caller)
    header = f"{headers['baggage']},note={SECRET}-{'é' * 4100}"
    assert len(header) < 8192 < len(header.encode())
    before = propagation.ignored_baggage()
    with caplog.at_level(logging.DEBUG):
        with propagation.extract({"baggage": header}) as tree:
            callee = Guard(cfg, session_id="the callee's own", agent="researcher")
            assert baggage.get_baggage("note") is None
        assert tree == caller.delegation_tree
        assert propagation.read_tree({"baggage": header}) == caller.delegation_tree
    assert propagation.ignored_baggage() == before
    assert place(callee).root == place(caller).root and place(callee).depth == 1
    assert caller.before_call("web_search", {"q": 1}).code == "allow"
    assert callee.before_call("web_search", {"q": 2}).code == "allow"
    assert callee.before_call("web_search", {"q": 3}).code == codes.CAP_TREE  # one budget
    assert not any(SECRET in r.getMessage() or "é" in r.getMessage() for r in caplog.records)


def test_no_malformed_member_of_anyone_reaches_a_log(caplog: pytest.LogCaptureFixture) -> None:
    """Members OpenTelemetry's propagator would log whole (no ``=``, a bad value, non-ASCII, too long)
    are dropped without a word; the good ones are taken."""
    header = ",".join(
        [f"nokey{SECRET}", f"k=bad value {SECRET}", f"k2={SECRET}é", f"k3={SECRET * 400}", "tenant=acme"]
    )
    with caplog.at_level(logging.DEBUG), propagation.extract({"baggage": header}) as tree:
        assert tree is None
        assert baggage.get_all() == {"tenant": "acme"}
    assert not any(SECRET in r.getMessage() for r in caplog.records)


# -- extract and inject add to what is there ----------------------------------------------------------


def test_extract_with_a_traceparent_keeps_the_callers_context_and_adds_the_requests_baggage() -> None:
    caller = Guard(config(4, searches=5), session_id=f"conversation-{uuid.uuid4().hex}")
    headers: dict[str, str] = {"traceparent": TRACEPARENT}
    propagation.inject(headers, caller)
    headers["baggage"] += ",userId=42"
    mine = context.create_key("the service's own")
    token = context.attach(context.set_value(mine, "kept", baggage.set_baggage("tenant", "acme")))
    try:
        with propagation.extract(headers) as tree:
            assert tree == caller.delegation_tree and propagation.current_tree() == tree
            assert baggage.get_baggage("tenant") == "acme"  # the service's middleware set it
            assert context.get_value(mine) == "kept"
            assert baggage.get_baggage("userId") == "42"  # the request's entry on top
            span = trace.get_current_span().get_span_context()
            assert f"{span.trace_id:032x}" == TRACEPARENT.split("-")[1]
        assert baggage.get_all() == {"tenant": "acme"}  # the block restored the context
    finally:
        context.detach(token)


def test_inject_merges_into_a_baggage_header_already_there() -> None:
    guard = Guard(config(4, searches=5), session_id=f"conversation-{uuid.uuid4().hex}", agent="planner")
    stale = tree_entries(depth="3", path="0123456789ab,0123456789ab,0123456789ab,0123456789ab")
    headers = {"baggage": f"userId=42,{stale},k=v;prop=1, bad member"}
    propagation.inject(headers, guard)
    members = headers["baggage"].split(",")
    assert "userId=42" in members and "k=v;prop=1" in members and "bad member" not in headers["baggage"]
    assert propagation.read_tree(headers) == guard.delegation_tree  # otelguard's entries updated
    assert sum(m.startswith("otelguard.") for m in members) == 3
    # within the size limit: others' entries that do not fit are left out whole, the tree's kept
    crowded = {"baggage": ",".join(f"k{n}={'v' * 90}" for n in range(120))}
    propagation.inject(crowded, guard)
    assert len(crowded["baggage"].encode()) <= 8192
    assert propagation.read_tree(crowded) == guard.delegation_tree
    assert all(m.endswith("v" * 90) for m in crowded["baggage"].split(",")[3:])


# -- through real sidecars -----------------------------------------------------------------------------


def sidecar_config(max_depth: int, searches: int) -> str:
    return (
        f"signature_key: {KEY}\n"
        "caps:\n"
        "  on_hit: reject\n"
        "  turn: {web_search: 0}\n"
        "  session: {web_search: 0}\n"
        f"  tree: {{web_search: {searches}}}\n"
        f"delegation: {{max_depth: {max_depth}}}\n"
    )


def ask(serve: Serve, session: str, tool: str, headers: dict[str, str]) -> str:
    body = {"session_id": session, "tool_name": tool, "args": {"q": session}, "call_id": f"{session}-{tool}"}
    answer: dict[str, Any] = serve.post("/v1/before_call", body, headers=headers)
    return str(answer["code"])


@pytest.mark.parametrize("max_depth", [4, 0])
def test_a_chain_of_services_behind_a_real_sidecar_stays_one_tree_past_max_depth(
    max_depth: int, tmp_path: Path
) -> None:
    """Each service's agent runs behind ``otelguard serve`` and hands the sidecar the headers of the
    request its service handles (the tree of the service before): every hop charges the one tree,
    past max_depth too, and a spawn at max_depth or deeper is refused."""
    hops = max_depth + 4
    serve = start_replica(tmp_path, config=sidecar_config(max_depth, searches=hops))
    try:
        chain = service_chain(config(max_depth, searches=hops), hops)
        sent = []
        for guard in chain:
            headers = {"content-type": "application/json"}
            propagation.inject(headers, guard)
            sent.append(headers)
        # the agent behind the sidecar at hop n sits at depth n
        searches = [ask(serve, f"hop-{n}", "web_search", headers) for n, headers in enumerate(sent, 1)]
        assert searches == ["allow"] * hops
        assert ask(serve, "hop-1", "web_search", sent[0]) == codes.CAP_TREE
        assert ask(serve, "hop-late", "web_search", sent[-1]) == codes.CAP_TREE  # one budget, any depth
        spawns = [ask(serve, f"hop-{n}", "Task", headers) for n, headers in enumerate(sent, 1)]
        refused = hops - max(max_depth, 1) + 1  # hops at depth max_depth and deeper
        assert spawns == ["allow"] * (hops - refused) + [codes.DELEGATION_DEPTH] * refused
    finally:
        stop_process(serve.process)


def test_over_8192_bytes_of_baggage_on_a_real_sidecar_keeps_the_tree_and_logs_no_value(
    tmp_path: Path,
) -> None:
    serve = start_replica(tmp_path, config=sidecar_config(4, 2))
    try:
        caller = Guard(config(4, searches=2), session_id=f"conversation-{uuid.uuid4().hex}")
        headers: dict[str, str] = {"content-type": "application/json"}
        propagation.inject(headers, caller)
        headers["baggage"] += f",note={SECRET}-{'é' * 4100}"
        sent = {**headers, "baggage": headers["baggage"].encode().decode("latin-1")}  # raw UTF-8 bytes
        assert len(headers["baggage"]) < 8192 < len(headers["baggage"].encode())
        codes_seen = [ask(serve, f"callee-{n}", "web_search", sent) for n in range(3)]
        assert codes_seen == ["allow", "allow", codes.CAP_TREE]  # three sessions, one tree of 2
    finally:
        stop_process(serve.process)
    err = stderr_of(tmp_path, serve)
    assert SECRET not in err and "otelguard.path" not in err
