"""Launchers turn a case into argument lists and run them; they never import the worker side."""

from scalegate.launch.local import LocalLauncher, run_case

__all__ = ["LocalLauncher", "run_case"]
