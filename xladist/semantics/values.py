"""How values travel between xladist's layers: an array is a numpy array of the logical
values, a tuple a Python tuple of values, and a token the `TOKEN` sentinel."""

from __future__ import annotations


class _Token:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = _Token()
