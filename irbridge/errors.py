"""The project's own error types. Every failure a user can cause raises one of these."""

from __future__ import annotations


class IrbridgeError(Exception):
    """Base of all irbridge errors: a one-line message, optionally with a hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        # Messages quote names from files: print them as one clean line (see sanitize.py).
        from irbridge.sanitize import clean

        text = self.message if not self.hint else f"{self.message} (hint: {self.hint})"
        return clean(text)


class FileFormatError(IrbridgeError):
    """A file is truncated, corrupt, of an unknown kind or of a newer IR version."""


class UnknownDimError(FileFormatError):
    """`--bind` names a dim the file does not have; `known` lists the dims it has."""

    def __init__(self, message: str, known: tuple[str, ...]) -> None:
        super().__init__(message)
        self.known = known


class VerificationError(IrbridgeError):
    """An IR graph breaks a structural rule; the message names the node and value."""


class OpError(IrbridgeError):
    """An op is unknown, or its inputs or attributes do not fit its schema."""


class CaptureError(IrbridgeError):
    """A front-end could not capture or lower a model."""


class ExportError(IrbridgeError):
    """A back-end could not write the IR in its target format."""
