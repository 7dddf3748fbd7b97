"""How the project decodes a text file a user gives it: a trace, a rate profile, a latency
profile, a `perf predict --points` CSV, a saved result, a calibration, a sweep spec, an
inventory, a catalog entry. Here, in the lowest package, so every package reads them alike."""

from __future__ import annotations

import errno
import json
import os
import stat

__all__ = ["decode_text", "read_input", "MAX_INPUT_BYTES"]

MAX_INPUT_BYTES = 2**30   # 1 GiB: past any trace, profile or result this tool reads
_CHUNK_BYTES = 2**24


def read_input(path) -> bytes:
    """The whole file a user gives (a pipe too: `<(...)` cannot be reopened, so it is read
    once), refused as an OSError the readers already word (errno EFBIG, its strerror the
    reason) when it is a device such as /dev/zero or a terminal, or holds over
    MAX_INPUT_BYTES: such an input was read until memory ran out."""
    with open(path, "rb") as stream:
        mode = os.fstat(stream.fileno())
        if stat.S_ISCHR(mode.st_mode) and os.path.samestat(mode, os.stat(os.devnull)):
            return b""   # /dev/null: nothing, as an empty file (each reader says what it wanted)
        too_big = OSError(errno.EFBIG, f"it holds over {MAX_INPUT_BYTES / 2**30:g} GiB, more than any input this "
                                       f"tool reads", os.fspath(path))
        if stat.S_ISREG(mode.st_mode) and mode.st_size > MAX_INPUT_BYTES:
            raise too_big
        if stat.S_ISCHR(mode.st_mode):
            raise OSError(errno.EFBIG, "it is a device, not a file: give a file, or a pipe such as <(...)",
                          os.fspath(path))
        chunks, size = [], 0
        while chunk := stream.read(_CHUNK_BYTES):
            size += len(chunk)
            if size > MAX_INPUT_BYTES:
                raise too_big
            chunks.append(chunk)
    return b"".join(chunks)


def decode_text(raw: bytes, *, universal_newlines: bool = False) -> str:
    """`raw` (a whole file's bytes) as text: UTF-8, with or without a byte order mark
    (Notepad and Excel write one), or UTF-16 / UTF-32 (PowerShell 5's `>` writes UTF-16
    with a BOM), the mark dropped (so a line's first column is the editor's column 1).

    The encoding is chosen by `json.detect_encoding`, the rule `json.loads` applies to
    bytes: a BOM, else the zero bytes that UTF-16 and UTF-32 put beside a leading ASCII
    character (a CSV header, a JSON object and a TOML file all start with one), else
    UTF-8. Any other encoding (Latin-1, Windows-1252) is not guessed at: a wrong guess
    would read other characters without a word.

    universal_newlines : read '\\r\\n' and a lone '\\r' as '\\n', as `open()` in text mode
        does (the TOML readers, which read files so before). False (a CSV reader, whose
        `csv` module wants the line ends as written): the text as decoded.

    Raises
    ------
    UnicodeDecodeError : `raw` is not text in the chosen encoding; each reader words it
        for its file.

    >>> decode_text(b"\\xef\\xbb\\xbfarrival_s") == decode_text("arrival_s".encode("utf-16")) == "arrival_s"
    True
    >>> decode_text(b"a = 1\\r\\nb = 2\\rc = 3\\n", universal_newlines=True)
    'a = 1\\nb = 2\\nc = 3\\n'
    """
    text = raw.decode(json.detect_encoding(raw))
    return text.replace("\r\n", "\n").replace("\r", "\n") if universal_newlines else text
