"""Errors the daemon's parts raise while handling a message."""

from __future__ import annotations


class HandlerError(Exception):
    """A request that cannot be served; answered with an ``error`` carrying ``code``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
