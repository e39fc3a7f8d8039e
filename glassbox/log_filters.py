"""Logging filters that keep secrets out of the logs.

The ``mcp`` SDK logs a stdio tool server's stdout line, whole and with a traceback, when the line
is not a JSON-RPC message. A careless server may print its environment (its API tokens) there,
so the record is reworded before any handler sees it (the fact stays, the line goes) and
lowered to DEBUG: the caller reports the failure itself, in words ("does not speak MCP").
"""

from __future__ import annotations

import logging


class HideToolServerOutput(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if "Failed to parse JSONRPC message" in str(record.msg):
            record.msg = "a tool server wrote a line that is not an MCP message (not logged: it may hold secrets)"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True
