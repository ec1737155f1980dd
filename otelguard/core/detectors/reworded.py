"""Reworded queries: a search tool asked the same thing in other words, or answering what it already
answered.

A search agent that cannot find something rewords its query ("CBS station", "CBS affiliate",
"CBS-affiliated station") and gets "could not find" back each time, or the same page again: no exact
rule sees it, since the arguments differ each time. Here each successful call of a search-like tool
(``ToolFacts.search``) whose query can be read (``searches.query_of``) is judged by what it brought:
a result saying nothing was found (in its many wordings: ``searches.nothing_found``), or one the tool
already returned this turn (the same page, near enough: a sketch of its word shingles), extends the
tool's *streak* of searches that brought nothing new; a new result ends it.

* ``after``: a search that brought nothing new and rewords the streak's earlier queries (its words
  all among one of theirs, see below) is warned once the streak is at ``warn_after.reworded_query``
  (2). Searches for other things that happen to find nothing are not: runs that solve their task
  make them too.
* ``before`` (``hard_stop``): once the streak is at ``hard_stop_after.reworded_query`` (2), a query
  made only of words one earlier query of the streak used (case, punctuation, stop words, word order
  and simple endings aside: ``searches.words``) is a rewording and is rejected,
  ``rejects_before_stop`` times per streak; sent after that, it stops the turn (``block``). A query
  joining the words of several earlier ones asks for what none of them asked (a more specific
  search): it is one only from twice the stop, and past twice the stop so is a query sharing any
  word with the streak's. A query that is one of the titles a result of the streak quoted
  ("Similar: ['The Prince & Me', ...]", "did you mean \"...\"") and not yet sent runs: the model is
  taking up what the search itself answered. The very call again (its signature), when it had found
  something, is left to the exact rules (``no_progress``, ``identical_call``).

Measured on the 811 runs of a ReAct search agent (Reflexion's HotpotQA runs): of the runs whose
searches brought nothing new three times or more, most are refused a rewording, and no run that
solved its task is refused a call (refusing a query that joined two earlier ones did: it was a new
search).

What it knows of searches (queries and results as digests, the streak of each tool) is
``searches.py``'s: nothing of a query or result text is kept, and a decision carries counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran, TurnCounts
    from otelguard.core.detectors.state import SignatureState

__all__ = ["REWORDED_QUERY", "WIDER_AFTER_FACTOR", "RewordedQuery"]

WIDER_AFTER_FACTOR: Final = 2
"""From this many times the stop, a query made of the words of several of the streak's queries is a
rewording too, and past it a query sharing any word with them."""

WARN: Final = (
    "{tool} has searched {count} times in a row without finding anything new (nothing found, or "
    "results it had already returned). Rewording the same query will not find more: search for "
    "something else, use what you have, or say what you could not find."
)
LAST_WARN: Final = (
    "{tool} has searched {count} times in a row without finding anything new (nothing found, or "
    "results it had already returned). A query made of the same words will not be run: search for "
    "something else, use what you have, or say what you could not find."
)
REJECT: Final = (
    "Not run: {tool} has already searched {count} times in a row without finding anything new, and "
    "this query only rewords those searches. Search for something else, use what you have, or say what "
    "you could not find; if you keep rewording it, the turn stops."
)
BLOCK: Final = (
    "Not run: {tool} has searched {count} times in a row without finding anything new, and rewordings "
    "were sent again after being refused. Tell the user what you could not find."
)


class RewordedQuery:
    """reworded_query: see the module's docstring. The query of the call ``before`` judges is the one
    the guard put in ``turn.query`` for it (``Query.sig`` is the call's signature)."""

    __slots__ = ()
    name = "reworded_query"
    code = codes.REWORDED_QUERY_WARN
    warns = True
    reads_query = True  # ``before`` judges only the call's query: a call without one skips it

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        asked = turn.query
        if asked is None or asked.sig is not sig:
            return None
        tool = turn.searches.tools.get(sig.tool_name)
        if tool is not None and state is not None and asked.sent not in tool.empty:
            return None  # the very call again, that found something: the exact rules' (no_progress)
        stop = turn.stop_after["reworded_query"]
        if tool is None or tool.streak < stop or not tool.reworded(asked, WIDER_AFTER_FACTOR * stop):
            return None
        if not commit:
            return turn.WOULD_REFUSE
        if tool.rejects < turn.rejects_before_stop:
            tool.rejects += 1
            return turn.decide("reject", codes.REWORDED_QUERY_REJECT, sig, tool.streak, stop, message=REJECT)
        return turn.decide("block", codes.REWORDED_QUERY_BLOCK, sig, tool.streak, stop, message=BLOCK)

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        """The streak of the search just recorded, when it reworded the streak's queries, from
        ``warn_after`` on; at the stop, with ``hard_stop``, the warning says a rewording will not run."""
        sig, streak = turn.searches.last
        warn = turn.warn_after["reworded_query"]
        if sig is not call.sig or streak < warn:
            return None
        last = turn.hard_stop and streak >= turn.stop_after["reworded_query"]
        return turn.decide(
            "warn", codes.REWORDED_QUERY_WARN, call.sig, streak, warn, message=LAST_WARN if last else WARN
        )


REWORDED_QUERY: Final = RewordedQuery()
