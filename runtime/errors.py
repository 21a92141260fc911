"""The runtime's user-facing error: str() is the one line the CLI prints (no traceback)."""


class RunError(Exception):
    """A problem the user can fix (missing cache, no GPU, bad weights file, ...)."""
