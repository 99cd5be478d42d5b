"""Read-only SQL, the host's half: a statement check before a query goes into the sandbox.

Queries run inside the sandbox, in an in-memory SQLite database built from the DataFrames,
under an authorizer that allows reading only (guest/sql.py): that is the guard. This check
comes first so that a refused query never starts a sandbox and is reported clearly: it reads
the SQL with a small lexer (strings, quoted identifiers and comments are skipped, never
matched), and refuses

- more than one statement;
- a statement that does not start with SELECT, WITH or VALUES;
- a keyword that writes, attaches or configures anywhere in it (INSERT, UPDATE, DELETE,
  REPLACE unless it is the replace() function, CREATE, DROP, ALTER, ATTACH, DETACH, PRAGMA,
  VACUUM, REINDEX, ANALYZE), which also catches `WITH x AS (...) DELETE ...`.

It also lists the identifiers the query mentions, so that only the tables it names are
loaded into SQLite.

Must not import anything from sandbox_kernel, nor wasmtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["READ_KEYWORDS", "WRITE_KEYWORDS", "SqlCheck", "check_sql"]

READ_KEYWORDS: Final = frozenset({"SELECT", "WITH", "VALUES"})
WRITE_KEYWORDS: Final = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
    }
)
_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*(?:.|\n)*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<quoted>"(?:[^"]|"")*(?:"|\Z)|\[[^\]]*(?:\]|\Z)|`(?:[^`]|``)*(?:`|\Z))
  | (?P<word>[A-Za-z_\x80-\uffff][A-Za-z0-9_$\x80-\uffff]*)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    line: int


@dataclass(frozen=True)
class SqlCheck:
    """The outcome of `check_sql`: refused with a reason (and its line), or allowed."""

    violation: str | None
    line: int | None
    identifiers: tuple[str, ...]
    """Names the statement mentions (words and quoted identifiers), lower-cased, unique."""

    @property
    def allowed(self) -> bool:
        return self.violation is None


def _tokens(sql: str) -> list[_Token]:
    tokens = []
    line = 1
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or "other"
        text = match.group()
        if kind not in ("space", "comment"):
            tokens.append(_Token(kind, text, line))
        line += text.count("\n")
    return tokens


def _unquote(token: _Token) -> str:
    text = token.text
    if token.kind != "quoted":
        return text.lower()
    body = text[1:-1] if len(text) > 1 else ""
    quote = text[0]
    return body.replace(quote * 2, quote).lower() if quote != "[" else body.lower()


def check_sql(sql: str) -> SqlCheck:
    """Whether `sql` is one read-only statement; the names it mentions."""
    tokens = _tokens(sql)
    statements: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == "other" and token.text == ";":
            statements.append([])
        else:
            statements[-1].append(token)
    statements = [s for s in statements if s]
    identifiers = tuple(dict.fromkeys(_unquote(t) for t in tokens if t.kind in ("word", "quoted")))
    if not statements:
        return SqlCheck("the query holds no SQL statement", 1, identifiers)
    if len(statements) > 1:
        line = statements[1][0].line
        message = f"one statement per query, found {len(statements)}"
        return SqlCheck(message, line, identifiers)
    statement = statements[0]
    first = statement[0]
    if first.kind != "word" or first.text.upper() not in READ_KEYWORDS:
        message = f"only SELECT, WITH or VALUES queries are allowed, not {first.text.upper()!r}"
        return SqlCheck(message, first.line, identifiers)
    for i, token in enumerate(statement):
        word = token.text.upper() if token.kind == "word" else ""
        if word not in WRITE_KEYWORDS:
            continue
        following = statement[i + 1].text if i + 1 < len(statement) else ""
        if word == "REPLACE" and following == "(":
            continue  # the replace(text, old, new) function
        message = f"{word} is not allowed: queries are read-only"
        return SqlCheck(message, token.line, identifiers)
    return SqlCheck(None, None, identifiers)
