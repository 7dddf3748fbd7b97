"""Typed errors of the hardware catalog. Every message is one line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CatalogError", "UnknownNameError", "CatalogValidationError"]


class CatalogError(Exception):
    """Base class of every error the hardware catalog raises."""


class CatalogValidationError(CatalogError, ValueError):
    """A catalog file is malformed; the message names the file, the field and the fix."""


class UnknownNameError(CatalogError, KeyError):
    """A GPU, machine or model name is not in the catalog.

    Attributes: ``kind`` ("gpu", "machine", "model"), ``name`` (as asked),
    ``known`` (the catalog's names) and ``suggestions`` (close matches, best first).
    """

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = tuple(known)
        super().__init__(kind, name, known)  # args rebuild the error when unpickled
        self.kind, self.name, self.known = kind, name, known

    @property
    def suggestions(self) -> list[str]:
        return close_matches(self.name, self.known)

    def __str__(self) -> str:  # KeyError would print the repr of its args
        return unknown_name_message(self.kind, self.name, self.known)


def close_matches(name: str, known: Iterable[str]) -> list[str]:
    """Up to three known names that look like ``name`` (case-insensitive), best first."""
    return difflib.get_close_matches(str(name).lower(), list(known), n=3)


def unknown_name_message(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown gpu 'h100' — did you mean 'h100-80gb'? Known: a100-80gb, ...``"""
    known = sorted(known)
    hint = " or ".join(repr(s) for s in close_matches(name, known))
    hint = f" — did you mean {hint}?" if hint else "."
    return f"unknown {kind} {name!r}{hint} Known: {', '.join(known) or '(none)'}"
