"""The package version: the one place it is written (setup.cfg reads it with ``attr:``)."""

from __future__ import annotations

from importlib import metadata

__version__ = "0.1.0.dev0"


def installed_version() -> str:
    """The installed distribution's version, or :data:`__version__` when running from a source tree."""
    try:
        return metadata.version("exmcp_actors")
    except metadata.PackageNotFoundError:
        return __version__
