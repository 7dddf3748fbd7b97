"""How the project decodes a text file a user gives it (a trace, a rate profile, a saved result).
Here, in the lowest package, so that every package may read its files by the same rule."""

from __future__ import annotations

import json

__all__ = ["decode_text"]


def decode_text(raw: bytes) -> str:
    """`raw` (a whole file's bytes) as text: UTF-8, with or without a byte order mark
    (Notepad and Excel write one), or UTF-16 / UTF-32 (PowerShell 5's `>` writes UTF-16
    with a BOM), the mark dropped.

    The encoding is chosen by `json.detect_encoding`, the rule `json.loads` applies to
    bytes: a BOM, else the zero bytes that UTF-16 and UTF-32 put beside a leading ASCII
    character (a CSV header and a JSON object both start with one), else UTF-8. Any
    other encoding (Latin-1, Windows-1252) is not guessed at: a wrong guess would read
    other characters without a word.

    Raises
    ------
    UnicodeDecodeError : `raw` is not text in the chosen encoding; each reader words it
        for its file.

    >>> decode_text(b"\\xef\\xbb\\xbfarrival_s") == decode_text("arrival_s".encode("utf-16")) == "arrival_s"
    True
    """
    return raw.decode(json.detect_encoding(raw))
