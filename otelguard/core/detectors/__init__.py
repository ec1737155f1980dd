"""The loop detectors (docs/detectors.md), one module per part:

* ``state``: a signature's counts, and the memory across turns (``cross_turn_failure``);
* ``repetition``: the cycle window;
* ``turn``: ``TurnDetectors``, a turn's state, ``before_call`` refusals and ``after_call`` verdicts;
* ``precedence``: the order both follow, as data (the docs' "Ordering", pinned by a test);
* ``messages``: what the model reads for each code.
"""

from otelguard.core.detectors.state import SessionMemory, SignatureState
from otelguard.core.detectors.turn import TurnDetectors

__all__ = ["SessionMemory", "SignatureState", "TurnDetectors"]
