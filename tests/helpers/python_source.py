"""Parsing the project's own Python source in tests that check rules over it."""

from __future__ import annotations

import ast

# CPython 3.11's AST constructor may raise a spurious SystemError, "AST constructor recursion depth mismatch",
# in a process with threads (seen once in this suite on 3.11.7, on a file that parses cleanly; reported as
# CPython gh-106905). Such a parse is tried again, up to three times in all, before the error is raised.
_ATTEMPTS = 3


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, tried again when the interpreter's own bug above strikes."""
    for _ in range(_ATTEMPTS - 1):
        try:
            return ast.parse(source)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error):
                raise
    return ast.parse(source)
