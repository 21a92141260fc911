"""The project's user-facing error: a mistake the user can fix, reported as one line."""
from __future__ import annotations


class UserError(Exception):
    """A user mistake (bad option, unknown GPU name, no GPU for --gpu auto); str() is the one line
    to print. The CLI turns it into click.ClickException: exit code 1, no traceback."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, whatever the caller passed
