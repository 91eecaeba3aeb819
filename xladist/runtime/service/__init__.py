"""The job's coordination service: a small TCP server (server.py) hosted by the launching
process or rank 0, and each rank's connection to it (client.py). See docs/ARCHITECTURE.md
"The coordination service" for the protocol."""

from .protocol import ADDRESS_ENV, TOKEN_ENV

__all__ = ["ADDRESS_ENV", "TOKEN_ENV", "Service"]


def __getattr__(name: str):
    # The server (with `secrets`) is loaded where it is hosted, not by a rank's client.
    if name == "Service":
        from .server import Service
        return Service
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
