"""Errors a user can act on: what was wrong, with which input, and a HINT saying what to change."""

from __future__ import annotations


class ScalegateError(Exception):
    """Bad input or environment. The message names the input; ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}\nHINT: {hint}" if hint else message)


class SpecError(ScalegateError, ValueError):
    """A case specification (topology, strategy, model, batch, steps) that cannot run."""


class BaselineError(ScalegateError):
    """A baseline file that cannot be read or does not match this schema or profile."""


class LaunchError(ScalegateError):
    """A job that did not produce results: crash, timeout, missing or malformed rank output."""
