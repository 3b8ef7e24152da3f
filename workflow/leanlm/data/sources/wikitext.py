"""MediaWiki dump -> plain prose: the packaged Wikipedia sample (gensim's enwiki test dump).

The corpus wants running text as a reader sees it, so this keeps paragraphs and link labels and
removes everything else: templates and infoboxes, tables, references, comments, files and
categories, headings, list items, and the trailing reference sections. Only the standard library is
used (``xml.etree`` for the dump, regular expressions for the markup).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

# Sections after which an article holds no prose (bibliographies, link lists).
_END_SECTIONS = frozenset({
    "references", "notes", "footnotes", "citations", "sources", "bibliography", "further reading",
    "external links", "see also", "works cited", "notes and references", "literature",
})
# Elements whose content is not prose (removed with their content); other tags keep their content.
_DROP_ELEMENTS = ("ref", "math", "gallery", "timeline", "table", "code", "syntaxhighlight", "source",
                  "score", "imagemap", "chem", "hiero", "nowiki", "pre", "references", "div")
# Link namespaces that are not part of the text (File:, Category:, interlanguage links such as fr:).
_NON_TEXT_LINK = re.compile(r"^\s*:?\s*(file|image|media|category|wikipedia|wp|template|help|portal|[a-z]{2,3}(-[a-z]+)?)\s*:", re.I)

_COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)
_SELF_CLOSING = re.compile(r"<(ref|references)\b[^>]*/\s*>", re.I)
_ANY_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_INNER_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_INNER_TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.S)
_INNER_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:)?//[^\s\]]*\s*([^\]]*)\]")
_BARE_URL = re.compile(r"https?://\S+")
_HEADING = re.compile(r"^(=+)\s*(.*?)\s*\1\s*$")
_EMPHASIS = re.compile(r"'{2,}")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EMPTY_BRACKETS = re.compile(r"\(\s*[,;:]?\s*\)|\[\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")


def _remove_nested(pattern: re.Pattern, text: str) -> str:
    # Innermost first, until nothing matches: handles {{a|{{b}}}} and tables inside tables.
    while True:
        text, n = pattern.subn("", text)
        if n == 0:
            return text


def _link_text(match: re.Match) -> str:
    inner = match.group(1)
    if _NON_TEXT_LINK.match(inner):
        return ""
    label = inner.split("|")[-1] if "|" in inner else inner
    return label.strip()


def strip_wikitext(markup: str) -> str:
    """Plain prose of one article's wikitext: one paragraph per line."""
    text = _COMMENT.sub("", markup)
    text = _SELF_CLOSING.sub("", text)
    for name in _DROP_ELEMENTS:
        text = re.sub(rf"<{name}\b[^>]*>.*?</{name}\s*>", "", text, flags=re.S | re.I)
    text = _remove_nested(_INNER_TEMPLATE, text)
    text = _remove_nested(_INNER_TABLE, text)
    # Links: innermost first so that a File: caption holding links is removed as a whole afterwards.
    while True:
        text, n = _INNER_LINK.subn(_link_text, text)
        if n == 0:
            break
    text = _EXTERNAL_LINK.sub(lambda m: m.group(1), text)
    text = _BARE_URL.sub("", text)
    text = _ANY_TAG.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    paragraphs: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        heading = _HEADING.match(line)
        if heading:
            if heading.group(2).strip().lower() in _END_SECTIONS:
                break
            continue
        # List items, indents, definitions and leftover table/template lines are not prose.
        if not line or line[0] in "*#:;|!{}" or line.startswith("----"):
            continue
        line = _EMPTY_BRACKETS.sub("", line)
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(line.split()))
        if line:
            paragraphs.append(line)
    return "\n".join(paragraphs)


def iter_wiki_articles(path: str | Path) -> Iterator[tuple[str, str]]:
    """(title, wikitext) of every main-namespace, non-redirect page of a MediaWiki XML dump."""
    title = ns = text = None
    redirect = False
    for _, elem in ET.iterparse(str(path), events=("end",)):
        tag = elem.tag.rsplit("}", 1)[-1]
        if tag == "title":
            title = elem.text or ""
        elif tag == "ns":
            ns = (elem.text or "").strip()
        elif tag == "redirect":
            redirect = True
        elif tag == "text":
            text = elem.text or ""
        elif tag == "page":
            if ns == "0" and not redirect and text and not text.lstrip().lower().startswith("#redirect"):
                yield title, text
            title = ns = text = None
            redirect = False
            elem.clear()
