"""Every error xladist shows a user, and the one place their text is formatted.

Formats (see README "Error formats"):
  parse:    FILE:LINE:COL: message / the line / a caret under the column
  verifier: computation NAME, instruction `<printed instruction>`: message
            (expected SHAPE, got SHAPE)
  runtime:  rank R (replica I, partition J) | INSTRUCTION: message
The CLI prints `str(error)` and exits with `error.exit_code`, never a traceback.
"""

from __future__ import annotations


class XlaDistError(Exception):
    """Base of all errors meant for the user; the CLI prints them without traceback."""

    exit_code = 1


class HloParseError(XlaDistError):
    """Malformed HLO text, with its position."""

    exit_code = 2

    def __init__(self, message: str, line: int, column: int, line_text: str = "",
                 filename: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.line_text = line_text
        self.filename = filename
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.filename or '<text>'}:{self.line}:{self.column}"
        text = f"{where}: {self.message}"
        if self.line_text:
            shown = self.line_text.rstrip("\n")
            text += f"\n  {shown}\n  {' ' * (max(self.column, 1) - 1)}^"
        return text

    def with_filename(self, filename: str) -> "HloParseError":
        return HloParseError(self.message, self.line, self.column, self.line_text, filename)


class VerifierError(XlaDistError):
    """An instruction whose shape or attributes break the operation semantics."""

    exit_code = 2

    def __init__(self, message: str, *, computation: str | None = None,
                 instruction: str | None = None, expected=None, actual=None,
                 line: int | None = None):
        self.message = message
        self.computation = computation
        self.instruction = instruction
        self.expected = expected
        self.actual = actual
        self.line = line
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.computation:
            parts.append(f"computation {self.computation}")
        if self.instruction:
            where = f" (line {self.line})" if self.line else ""
            parts.append(f"instruction `{self.instruction}`{where}")
        head = ", ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.expected is not None or self.actual is not None:
            text += f"\n  expected: {self.expected}\n  actual:   {self.actual}"
        return text


class InputError(XlaDistError):
    """Arguments, input files or options that do not fit the module."""

    exit_code = 2


class UnsupportedError(XlaDistError):
    """A valid program uses something this backend cannot execute (the reason is given)."""

    exit_code = 2


class ExecutionError(XlaDistError):
    """A failure while running, located at a rank, device and instruction."""

    exit_code = 1

    def __init__(self, message: str, *, rank: int | None = None, replica: int | None = None,
                 partition: int | None = None, instruction: str | None = None):
        self.message = message
        self.rank = rank
        self.replica = replica
        self.partition = partition
        self.instruction = instruction
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.rank is not None:
            loc = f"rank {self.rank}"
            if self.replica is not None:
                loc += f" (replica {self.replica}, partition {self.partition or 0})"
            where.append(loc)
        if self.instruction:
            where.append(self.instruction)
        return (" | ".join(where) + ": " if where else "") + self.message


def as_given(setting: str, value) -> str:
    """`value` as the reader gives it: `setting` is a command-line option (`-n`,
    `--timeout`: "-n 2") or, ending in "=", a keyword of the Python API (`n=`: "n=2").
    Messages that tell the reader what to set take `setting` from their caller, who knows
    which of the two the reader used."""
    return f"{setting}{value}" if setting.endswith("=") else f"{setting} {value}"


def out_of_memory(error: MemoryError, what: str = "", **where) -> ExecutionError:
    """The one message for an allocation that failed: not a bug, so no traceback; `what`
    names the buffer, `where` locates it (rank, replica, partition, instruction)."""
    detail = str(error) or "the allocation failed"
    return ExecutionError(f"out of memory{' for ' + what if what else ''}: {detail}",
                          **where)


class DeadlockError(XlaDistError):
    """The static cross-device check found a program that would hang or mismatch."""

    exit_code = 1


class OutputError(XlaDistError):
    """A result that could not be written where it was asked for (the message says why and,
    when it was saved elsewhere, where)."""

    exit_code = 1
