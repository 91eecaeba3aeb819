"""What a rank and the service agree on: the environment that carries the service's address
and token, the protocol's number and the heartbeat's period and timeout. Both ends import it
(server.py, client.py); a rank's client does not import the server (nor `secrets`, for the
token it only reads)."""

from __future__ import annotations

HEARTBEAT_S = 1.0
HEARTBEAT_TIMEOUT_ENV = "XLADIST_HEARTBEAT_TIMEOUT"
DEFAULT_HEARTBEAT_TIMEOUT_S = 20.0
ADDRESS_ENV, TOKEN_ENV = "XLADIST_COORD", "XLADIST_COORD_TOKEN"
# 2: a rank's outputs come in one message with its answer (stop 39)
PROTOCOL = 2


def heartbeat_timeout() -> float:
    from xladist.environment import setting
    return setting(HEARTBEAT_TIMEOUT_ENV, DEFAULT_HEARTBEAT_TIMEOUT_S)
