"""What the readers share about the model's replies: their text, bounded, and their token usage in
the shapes providers report it.

The text is only ever handed to the guard in process (it fingerprints it and forgets it); the bound
keeps a reply that chanted to its output limit from being held whole.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["MAX_REPLY_CHARS", "reply_text", "usage_tokens"]

MAX_REPLY_CHARS: Final = 65_536
"""Characters of a reply kept for the guard: enough to see a passage repeat many times."""

# provider field names: OpenAI chat, OpenAI Responses / Anthropic, Gemini
_INPUT_FIELDS: Final = ("prompt_tokens", "input_tokens", "promptTokenCount", "input")
_OUTPUT_FIELDS: Final = ("completion_tokens", "output_tokens", "candidatesTokenCount", "output")
# Anthropic reports the cached part of the prompt beside ``input_tokens``, not inside it
_CACHED_INPUT_FIELDS: Final = ("cache_creation_input_tokens", "cache_read_input_tokens")


def reply_text(content: Any) -> str | None:
    """The text of a reply's content (a string, or the text parts of a block list), bounded; ``None``
    when it has none."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type", "text") in ("text", "output_text")
            and isinstance(block.get("text"), str)
        )
    else:
        return None
    return text[:MAX_REPLY_CHARS] if text else None


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def usage_tokens(usage: Any) -> tuple[int | None, int | None]:
    """``(input, output)`` tokens of a provider's usage object; ``None`` for a count it lacks (unknown
    usage charges nothing). Anthropic's cached prompt tokens count as input: the model read them."""
    if not isinstance(usage, dict):
        return None, None
    tokens_in = next((n for f in _INPUT_FIELDS if (n := _count(usage.get(f))) is not None), None)
    tokens_out = next((n for f in _OUTPUT_FIELDS if (n := _count(usage.get(f))) is not None), None)
    if tokens_in is not None:
        tokens_in += sum(_count(usage.get(f)) or 0 for f in _CACHED_INPUT_FIELDS)
    return tokens_in, tokens_out
