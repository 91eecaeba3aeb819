"""The job's coordination service: a small TCP server (server.py) hosted by the launching
process or rank 0, and each rank's connection to it (client.py). See docs/ARCHITECTURE.md
"The coordination service" for the protocol."""

from .server import ADDRESS_ENV, TOKEN_ENV, Service

__all__ = ["ADDRESS_ENV", "TOKEN_ENV", "Service"]
