"""Checks of the command line as typed, before click parses it.

A single-value option given twice is an error, not a silent "the last one wins": click
keeps the last value of an option that is not `multiple` (`provision --goal cost --rps 70
--rps 80` plans for 80 req/s, without a word), and the last of a flag pair (`--verify
--no-verify`). The user meant something by each: `refuse_repeated_options` reads the
command line against the click command's own option metadata and refuses the second
occurrence in one line naming the option. Options declared `multiple` (`--design`,
`provision cloud --without`) or counted repeat freely.

An output file typed with a trailing '/' (`--report outdir/`) means a folder: click hands
the command a `Path`, which has dropped the slash, and the page would be written as a
file named `outdir`. `refuse_folder_outputs` refuses it while the slash is still there.

Neither is a parser: `typed_options` follows the options it knows and stops, saying
nothing, where it meets anything else (an unknown option, a stray argument, `--`),
leaving that to click's own error.
"""

from __future__ import annotations

from ..errors import ProvisionerError
from ..files import refuse_folder_name

__all__ = ["refuse_repeated_options", "refuse_folder_outputs"]

# Options naming an output file (`provision sweep --out` names a folder).
FILE_OUTPUTS = {"--report", "--out", "--timeline"}
FOLDER_OUTPUT_COMMANDS = {"sweep"}


def refuse_repeated_options(command, argv: list[str]) -> None:
    """Raise `ProvisionerError` (one line, exit 2) when `argv` gives one option of one
    (sub)command twice, unless it is declared `multiple` or `count`.

    command : the root click command (`typer.main.get_command(app)`); a group's options
        and each subcommand's are counted apart, as click parses them.
    """
    seen: dict[tuple[int, str], tuple[str, str | None]] = {}   # (command, param) -> (as typed, value) first
    for owner, param, typed, value in typed_options(command, argv):
        if param.multiple or param.count:
            continue
        key = (id(owner), param.name)
        if key in seen:
            raise ProvisionerError(_message(typed, value, *seen[key]))
        seen[key] = (typed, value)


def refuse_folder_outputs(command, argv: list[str]) -> None:
    """Raise `ProvisionerError` when an output file option's value ends in '/' and is no folder."""
    for owner, param, typed, value in typed_options(command, argv):
        if typed in FILE_OUTPUTS and owner.name not in FOLDER_OUTPUT_COMMANDS and value:
            refuse_folder_name(value, typed)


def typed_options(command, argv: list[str]):
    """(command, option parameter, as typed, value or None) of each option `argv` gives,
    in order, each read against the (sub)command it belongs to; stops at what it does not know."""
    options = _options_of(command)
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            return
        if token.startswith("-") and len(token) > 1:
            typed, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
            param = options.get(typed)
            if param is None:   # --help, an unknown option: click's to handle
                return
            takes = 0 if (param.is_flag or param.count) else max(param.nargs, 1)
            if eq:
                value, takes = inline, takes - 1
            else:
                value = " ".join(tokens[i:i + takes]) if takes else None
            if takes < 0 or i + takes > len(tokens):   # `--force=1`, `--rps` last: click's error
                return
            i += takes
            yield command, param, typed, value
            continue
        sub = getattr(command, "commands", {}).get(token)
        if sub is None:   # a positional argument of a leaf command (options may follow it)
            if getattr(command, "commands", None):
                return    # a group's unknown command: click's error
            continue
        command, options = sub, _options_of(sub)


def _options_of(command) -> dict:
    """Every spelling of every option of `command` (`--verify` and `--no-verify`) -> its parameter."""
    return {spelling: p for p in command.params if getattr(p, "param_type_name", "") == "option"
            for spelling in (*p.opts, *p.secondary_opts)}


def _message(typed: str, value: str | None, first_typed: str, first_value: str | None) -> str:
    if value is None and first_value is None:   # a flag
        if typed == first_typed:
            return f"{typed} is given twice; give it once"
        return f"{first_typed} and {typed} are both given; give one of them"
    return f"{typed} is given twice ('{first_value}', then '{value}'); it takes one value: give it once"
