"""The order the code walks (``precedence.py``) is the order the docs give (docs/detectors.md, "Ordering")."""

from __future__ import annotations

import re
from pathlib import Path

from otelguard.core.decisions import CODES
from otelguard.core.detectors.precedence import AFTER_CALL, AFTER_MODEL, BEFORE_CALL, GATES, TOKEN_CAPS

DOCS = Path(__file__).resolve().parent.parent / "docs" / "detectors.md"


def _ordering() -> str:
    text = DOCS.read_text(encoding="utf-8")
    return text[text.index("## Ordering") :].split("\n## ", 1)[0]


def test_after_call_order_is_the_documented_one() -> None:
    section = _ordering()
    paragraph = section[section.index("`after_call` records the outcome") :].split("\n\n", 1)[0]
    documented = tuple(re.findall(r"`([a-z_]+_(?:warn|halt))`", paragraph))
    walked = tuple(rule.code for rule in AFTER_CALL)
    assert documented == walked
    assert set(walked) <= set(CODES)


def test_before_call_order_is_the_documented_one() -> None:
    section = _ordering()
    item = section[section.index("3. the hard-stop refusals") :].split("\n\n", 1)[0]
    documented = tuple(name for name in re.findall(r"`([a-z_]+)`", item) if not name.endswith("_reject"))
    assert documented == tuple(rule.name for rule in BEFORE_CALL)


def test_the_gates_order_is_the_documented_one() -> None:
    section = _ordering()
    item = section[section.index("2. the gates") :].split("\n3. ", 1)[0]
    names = re.findall(r"`([a-z_]+)`", item)
    documented = tuple(name for name in names if not name.startswith("_") and not name.endswith("_reject"))
    assert documented == tuple(gate.name for gate in GATES)
    assert GATES[-1].name == "hard_stop"  # the detectors of item 3 come last


def test_model_event_order_is_the_documented_one() -> None:
    section = _ordering()
    paragraph = section[section.index("`before_model` checks, in order") :].split("\n\n", 1)[0]
    caps = paragraph[paragraph.index("the token caps") : paragraph.index("the model is not")]
    assert tuple(re.findall(r"`(cap_[a-z]+)`", caps)) == tuple(cap.code for cap in TOKEN_CAPS)
    after = paragraph[paragraph.index("returns the first that fires") :]
    assert tuple(re.findall(r"`([a-z_]+_(?:warn|halt))`", after)) == tuple(rule.code for rule in AFTER_MODEL)
