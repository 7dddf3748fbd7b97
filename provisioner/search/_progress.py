"""`Progress`: the hooks a long search reports through (the CLI draws rich bars)."""

from __future__ import annotations


class Progress:
    """Progress hooks (the CLI draws rich bars; the default does nothing)."""

    def start(self, label: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def done(self) -> None:
        pass
