"""The project's user-facing error: cli.py turns it into one line and a non-zero exit."""


class UserError(Exception):
    """A mistake the user can fix (bad option, missing tool, unwritable path); str() is what to print."""
