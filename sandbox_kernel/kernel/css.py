"""CSS from guest outputs, made inert (`clean_css`) and confined to the output it came with
(`scoped_css`): the firewall's CSS rules, apart from its HTML rules (sanitize.py).

- Every construct that loads or runs something (`url(`, `@import`, `expression(`, bindings)
  and `position: fixed` or `sticky` (an output must not cover JupyterLab's interface) is made
  invalid in place, so the browser drops just that declaration or rule.
- A `<style>` sheet of an HTML output gets a class before each selector, and its `#id`
  selectors the prefix the output's ids get (tinycss2 parses it, CSS Syntax Level 3); of the
  at-rules only @media and @supports are kept, scoped likewise.

Must not import: anything Jupyter, wasmtime.
"""

from __future__ import annotations

import re
from typing import Any

import tinycss2

__all__ = ["clean_css", "scoped_css"]

# CSS that loads, runs or overlays. A function keeps its parentheses and an at-rule its
# place, so the browser drops just the declaration or rule around the invalid name.
_CSS_BLOCKED = re.compile(
    r"""(?P<function>(url|image-set|image|cross-fade|element|src|expression)\s*\()
      |(?P<rule>@import)|(?P<name>-moz-binding|behavior|javascript)\s*:
      |(?P<overlay>position\s*:\s*(fixed|sticky))""",
    re.IGNORECASE | re.VERBOSE,
)
_CSS_INSTEAD = {
    "function": "sandbox-blocked(",
    "rule": "@sandbox-blocked",
    "name": "sandbox-blocked:",
    "overlay": "position: absolute",
}
_CSS_COMMENT = re.compile(r"/\*.*?(\*/|$)", re.DOTALL)
_CSS_ESCAPE = re.compile(r"\\(?:([0-9a-fA-F]{1,6})[ \t\n\r\f]?|(.))", re.DOTALL)
_KEPT_AT = frozenset({"media", "supports"})  # at-rules whose rules are scoped and kept


def clean_css(css: str, found: list[str] | None = None) -> str:
    """CSS with comments, escapes and every loading or overlaying construct made invalid; what
    was blocked is added to `found`."""
    css = _CSS_ESCAPE.sub(_unescape_css, _CSS_COMMENT.sub(" ", css))  # as the browser reads it

    def block(match: re.Match[str]) -> str:
        if found is not None:
            found.append(f"CSS {' '.join(match.group().split())}")
        return _CSS_INSTEAD[str(match.lastgroup)]

    return _CSS_BLOCKED.sub(block, css)


def _unescape_css(match: re.Match[str]) -> str:
    """A CSS escape of a letter, digit, '-' or '_' decoded (so `u\\72l(` is seen as the `url(`
    it is); any other escape is kept as written, so decoding can never make a quote, a `<` or
    a `</style>` that was not there."""
    code = int(match[1], 16) if match[1] else ord(match[2])
    char = chr(code) if code < 0x80 else ""
    return char if char.isalnum() or char in "-_" else match.group()


def scoped_css(css: str, scope: str, found: list[str] | None = None) -> str:
    """A style sheet whose rules reach only elements inside an element of class `scope`, with
    its `#id` selectors renamed as the output's ids are (`scope`-id); at-rules other than
    @media and @supports are dropped (and added to `found`). Whitespace and comments stay as
    written, so the sheet reads as the library wrote it."""
    nodes = tinycss2.parse_stylesheet(css, skip_comments=False, skip_whitespace=False)
    sheet = "".join(_scoped_node(node, scope, found) for node in nodes)
    # The serializer writes a string's escapes as the characters they stand for: a `\3c`
    # would become a `<` that could close the <style> element. CSS reads `\3c ` as `<`.
    return sheet.replace("<", "\\3c ")


def _scoped_node(node: Any, scope: str, found: list[str] | None) -> str:
    if node.type in ("whitespace", "comment"):
        return _serialize([node])
    if node.type == "qualified-rule":
        selectors = []
        for part in _split_commas(node.prelude):
            lead = _leading_whitespace(part)
            rest = _renamed_ids(part[len(lead) :], scope)
            selectors.append(f"{_serialize(lead)}.{scope} {rest}")
        return ",".join(selectors) + "{" + _serialize(node.content) + "}"
    if node.type == "at-rule" and node.content is not None and node.lower_at_keyword in _KEPT_AT:
        inner = tinycss2.parse_rule_list(node.content, skip_comments=False, skip_whitespace=False)
        body = "".join(_scoped_node(child, scope, found) for child in inner)
        return f"@{node.at_keyword}{_serialize(node.prelude)}{{{body}}}"
    if found is not None and node.type == "at-rule":
        if not node.lower_at_keyword.startswith("sandbox-blocked"):  # named by clean_css
            found.append(f"CSS @{node.at_keyword} rule")
    elif found is not None and node.type == "error":
        found.append("CSS that does not parse")
    return ""


def _serialize(nodes: list[Any]) -> str:
    return str(tinycss2.serialize(nodes))


def _split_commas(tokens: list[Any]) -> list[list[Any]]:
    parts: list[list[Any]] = [[]]
    for token in tokens:
        if token.type == "literal" and token.value == ",":
            parts.append([])
        else:
            parts[-1].append(token)
    return [part for part in parts if any(t.type not in ("whitespace", "comment") for t in part)]


def _leading_whitespace(tokens: list[Any]) -> list[Any]:
    lead = []
    for token in tokens:
        if token.type != "whitespace":
            break
        lead.append(token)
    return lead


def _renamed_ids(tokens: list[Any], scope: str) -> str:
    """A selector with each `#id` named as the output's ids are."""
    text = []
    for token in tokens:
        serialized = _serialize([token])
        if token.type == "hash" and token.is_identifier:
            serialized = f"#{scope}-{serialized[1:]}"
        text.append(serialized)
    return "".join(text)
