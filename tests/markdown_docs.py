"""Reading the project's Markdown: fenced blocks, headings and the anchors GitHub gives them, links."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS_DIR = REPO / "docs"
DOCUMENTS = (README, *sorted(DOCS_DIR.glob("*.md")))

_FENCE = re.compile(r"^( *)```([\w-]*)\n(.*?)^\1```", flags=re.S | re.M)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    path: Path
    language: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path, *languages: str) -> list[Block]:
    """The fenced code blocks of one document in the given languages (indented ones too)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        indent, language, body = match.groups()
        if language in languages:
            dedented = "\n".join(line.removeprefix(indent) for line in body.splitlines())
            found.append(Block(path, language, text.count("\n", 0, match.start()) + 1, dedented + "\n"))
    return found


def all_blocks(*languages: str) -> list[Block]:
    return [block for path in DOCUMENTS for block in blocks(path, *languages)]


def prose(path: Path) -> str:
    """The document without its fenced blocks (a `# comment` in a block is not a heading)."""
    return _FENCE.sub("", path.read_text(encoding="utf-8"))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower-case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a document; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path), flags=re.M):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        if count:
            seen[f"{anchor}-{count}"] = 1
    return set(seen)


def links(path: Path) -> list[str]:
    """The link targets written in a document's prose."""
    return _LINK.findall(prose(path))
