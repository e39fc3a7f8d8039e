"""The fake Messages API's HTTP server: FakeAnthropicServer and its request handler.

It speaks the public API closely enough for the official ``anthropic`` SDK to talk to it through
``base_url`` (``ANTHROPIC_BASE_URL``):

* ``POST /v1/messages``, streaming (server-sent events in the API's order, see :mod:`.answers`;
  an ``error`` event ends a stream that fails half-way) and non-streaming (one ``message``
  object);
* ``POST /v1/messages/count_tokens`` (``{"input_tokens": N}``, counted as the messages
  endpoint counts them);
* errors as the API shapes them: ``{"type": "error", "error": {"type": ..., "message": ...},
  "request_id": ...}`` with the matching status (400, 401, 429, 500, 529 ...), ``retry-after``
  when given, a ``request-id`` header on every answer;
* rate-limit headers from the buckets of :mod:`.ratelimits`.

``POST /_fake/replies`` queues scripted replies (:mod:`.replies`), ``GET /_fake/requests`` lists
what the server received, ``POST /_fake/reset`` empties the queue and the record and refills the
buckets. The ``/_fake/`` endpoints take no credentials: the server listens on 127.0.0.1 only.

The server never keeps an API key: a recorded request shows ``x-api-key`` or ``authorization``
(SDK 2.x sends the key as a bearer token) as ``[present]``.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections import deque
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestrator.providers.fake_anthropic.answers import (
    Answer,
    build_answer,
    count_input_tokens,
    default_reply,
    new_id,
    stream_events,
    tool_pairing_problem,
)
from orchestrator.providers.fake_anthropic.ratelimits import RateLimits, TokenBucket, rfc3339
from orchestrator.providers.fake_anthropic.replies import ERROR_STATUS, RecordedRequest, Reply, default_message

MAX_BODY_BYTES = 32 * 1024 * 1024
# http.server knows no reason phrase for 529.
_REASONS = {529: "Site Overloaded"}


class FakeAnthropicServer:
    """The fake API on 127.0.0.1, served from a background thread. Use it as a context manager.

    ``port=0`` picks a free port (see :attr:`url`), so tests can run in parallel.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: RateLimits | None = None,
        enforce_limits: bool = False,
        api_key: str | None = None,
        chunk_delay_s: float = 0.0,
        tool_calls_per_turn: int = 1,
    ):
        self.limits = limits or RateLimits()
        # Unscripted answers to a request that offers tools: this many tool calls per turn (0: none).
        self.tool_calls_per_turn = tool_calls_per_turn
        self.enforce_limits = enforce_limits
        self.api_key = api_key  # None: any non-empty key is accepted
        self.chunk_delay_s = chunk_delay_s  # default pause between deltas of unscripted answers
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._buckets = self._new_buckets()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # Lifecycle

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeAnthropicServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, and cut the connections clients keep alive: a later server on the same
        port must not find its requests answered by this one's handler threads."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close_connections(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the management command)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._stopping.set()
            self._httpd.server_close()
            self._close_connections()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # Scripting

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self._requests.clear()
            self._buckets = self._new_buckets()

    # Internals used by the handler

    def _new_buckets(self) -> dict[str, TokenBucket]:
        return {
            "requests": TokenBucket(self.limits.requests_per_minute),
            "input-tokens": TokenBucket(self.limits.input_tokens_per_minute),
            "output-tokens": TokenBucket(self.limits.output_tokens_per_minute),
        }

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _admit(self, input_tokens: int) -> float:
        """Take one request and its input tokens from the buckets. When limits are enforced and a
        bucket is short (the output bucket empty counts too), take nothing and return the seconds
        to wait. A scripted reply is not used up by a refusal."""
        with self._lock:
            wanted = {"requests": 1, "input-tokens": input_tokens}
            if self.enforce_limits:
                wait = max(
                    self._buckets["output-tokens"].wait_for(1),
                    *(self._buckets[name].wait_for(amount) for name, amount in wanted.items()),
                )
                if wait > 0:
                    return wait
            for name, amount in wanted.items():
                self._buckets[name].take(amount)
            return 0.0

    def _charge_output(self, output_tokens: int) -> None:
        with self._lock:
            self._buckets["output-tokens"].take(output_tokens)

    def _rate_limit_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        with self._lock:
            for name, bucket in self._buckets.items():
                headers[f"anthropic-ratelimit-{name}-limit"] = str(bucket.per_minute)
                headers[f"anthropic-ratelimit-{name}-remaining"] = str(bucket.remaining())
                headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(bucket.seconds_to_full())
            # "tokens": the most restrictive token limit in effect.
            tightest = min(("input-tokens", "output-tokens"), key=lambda n: self._buckets[n].remaining())
            for suffix in ("limit", "remaining", "reset"):
                headers[f"anthropic-ratelimit-tokens-{suffix}"] = headers[f"anthropic-ratelimit-{tightest}-{suffix}"]
        return headers


def _handler_for(server: FakeAnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_FakeApiHandler):
        fake = server

    return Handler


class _FakeApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-anthropic/1.0"
    fake: FakeAnthropicServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the record instead
        return

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the connection was cut by stop()

    def handle_one_request(self) -> None:
        if self.fake._stopping.is_set():
            self.close_connection = True
            return
        try:
            super().handle_one_request()
        except ConnectionResetError:  # the client reset a connection it kept alive: its end, not an error
            self.close_connection = True

    # Routing

    def do_GET(self) -> None:
        if self.path == "/_fake/requests":
            self._send_json(200, {"requests": [asdict(r) for r in self.fake.requests]})
        else:
            self._send_error(404, "not_found_error", f"No route for GET {self.path}")

    def do_POST(self) -> None:
        request_id = new_id("req")
        body_bytes = self._read_body()
        if body_bytes is None:
            return
        if self.path.startswith("/_fake/"):
            self._control(body_bytes)
            return
        if self.path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"No route for POST {self.path}", request_id=request_id)
            return
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError as exc:
            message = f"The request body is not valid JSON: {exc}"
            self._send_error(400, "invalid_request_error", message, request_id=request_id)
            return
        self.fake._record(RecordedRequest("POST", self.path, self._safe_headers(), body))
        problem = self._check_request(body)
        if problem:
            status, error_type, message = problem
            self._send_error(status, error_type, message, request_id=request_id)
            return
        if self.path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": count_input_tokens(body)}, request_id=request_id)
            return
        self._messages(body, request_id)

    # /_fake/ control endpoints

    def _control(self, body_bytes: bytes) -> None:
        try:
            data = json.loads(body_bytes or b"{}")
            if self.path == "/_fake/replies":
                replies = [Reply.from_dict(item) for item in data.get("replies", [])]
                self.fake.enqueue(*replies)
                self._send_json(200, {"queued": len(replies), "pending": self.fake.pending()})
            elif self.path == "/_fake/reset":
                self.fake.reset()
                self._send_json(200, {"reset": True})
            else:
                self._send_json(404, {"error": f"No control endpoint {self.path}"})
        except (ValueError, TypeError, AttributeError) as exc:
            self._send_json(400, {"error": str(exc)})

    # /v1/ endpoints

    def _check_request(self, body: Any) -> tuple[int, str, str] | None:
        """The API's own refusals: credentials, version header, required fields."""
        credential = self._credential()
        if not credential:
            return 401, "authentication_error", "x-api-key header is required"
        if self.fake.api_key is not None and credential != self.fake.api_key:
            return 401, "authentication_error", "invalid x-api-key"
        if not self.headers.get("anthropic-version"):
            return 400, "invalid_request_error", "anthropic-version: header is required"
        if not isinstance(body, dict):
            return 400, "invalid_request_error", "The request body must be a JSON object"
        required = ("model", "messages") if self.path.endswith("count_tokens") else ("model", "max_tokens", "messages")
        for name in required:
            if name not in body:
                return 400, "invalid_request_error", f"{name}: Field required"
        if not isinstance(body["messages"], list) or not body["messages"]:
            return 400, "invalid_request_error", "messages: at least one message is required"
        if "max_tokens" in body and (not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1):
            return 400, "invalid_request_error", "max_tokens: must be an integer of at least 1"
        pairing = tool_pairing_problem(body["messages"])
        if pairing:
            return 400, "invalid_request_error", pairing
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool":
            names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
            if choice.get("name") not in names:
                return 400, "invalid_request_error", f"tool_choice: tool {choice.get('name')!r} is not in tools"
        return None

    def _messages(self, body: dict[str, Any], request_id: str) -> None:
        wait = self.fake._admit(count_input_tokens(body))
        if wait > 0:
            self._send_error(
                429,
                "rate_limit_error",
                "This request would exceed your organization's rate limit. Please reduce the prompt length "
                "or the maximum tokens requested, or try again later.",
                request_id=request_id,
                retry_after=max(1, math.ceil(wait)),
            )
            return
        reply = self.fake._next_reply()
        if reply is None:
            reply = default_reply(body, tool_calls_per_turn=self.fake.tool_calls_per_turn)
            reply.chunk_delay_s = self.fake.chunk_delay_s
        if reply.delay_s and self._sleep(reply.delay_s):
            return
        extra = dict(reply.headers)
        if reply.kind == "dropped" and not body.get("stream"):
            self.close_connection = True  # no answer at all
            return
        if reply.kind == "error" or (reply.kind == "stream_error" and not body.get("stream")):
            status = reply.status if reply.kind == "error" else ERROR_STATUS.get(reply.error_type, 500)
            self._send_error(
                status,
                reply.error_type,
                self._message_of(reply),
                request_id=request_id,
                retry_after=reply.retry_after,
                extra=extra,
            )
            return
        answer = build_answer(reply, body)
        self.fake._charge_output(answer.output_tokens)
        if body.get("stream"):
            self._stream(answer, reply, request_id, extra)
        else:
            message = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "model": answer.model,
                "content": answer.content(),
                "stop_reason": answer.stop_reason,
                "stop_sequence": None,
                "usage": {**answer.usage(), "service_tier": "standard"},
            }
            self._send_json(200, message, request_id=request_id, extra=extra)

    def _stream(self, answer: Answer, reply: Reply, request_id: str, extra: dict[str, str]) -> None:
        self.send_response(200)
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            "request-id": request_id,
            **self.fake._rate_limit_headers(),
            **{name.lower(): value for name, value in extra.items()},
        }
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for name, data, pause in stream_events(answer, reply):
                if pause and self._sleep(pause):
                    return
                self._write_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if reply.kind == "dropped":
                self.close_connection = True  # cut: no error event, no end of the chunked body
                return
            if reply.kind == "stream_error":
                error = {"type": "error", "error": {"type": reply.error_type, "message": self._message_of(reply)}}
                self._write_chunk(f"event: error\ndata: {json.dumps(error)}\n\n".encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. it timed out)

    # Helpers

    def _message_of(self, reply: Reply) -> str:
        message = reply.message or default_message(reply.error_type)
        if reply.echo_api_key:
            message += f" (key sent: {self._credential()})"
        return message

    def _credential(self) -> str:
        """The key the client sent: ``x-api-key``, or ``Authorization: Bearer`` (SDK 2.x sends that)."""
        key = self.headers.get("x-api-key") or ""
        bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        return key or bearer

    def _sleep(self, seconds: float) -> bool:
        """Pause; True when the server is stopping (the answer is abandoned)."""
        return self.fake._stopping.wait(seconds)

    def _read_body(self) -> bytes | None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self._send_error(
                413, "request_too_large", f"Request exceeds the maximum allowed size of {MAX_BODY_BYTES} bytes"
            )
            return None
        return self.rfile.read(length) if length else b""

    def _safe_headers(self) -> dict[str, str]:
        secret = {"x-api-key", "authorization"}
        return {
            name.lower(): ("[present]" if name.lower() in secret else value) for name, value in self.headers.items()
        }

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(
        self, status: int, data: Any, *, request_id: str | None = None, extra: dict[str, str] | None = None
    ) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status, _REASONS.get(status))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        headers = {"request-id": request_id, **self.fake._rate_limit_headers()} if request_id else {}
        headers.update({name.lower(): value for name, value in (extra or {}).items()})  # scripted ones win
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        request_id: str | None = None,
        retry_after: float | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        request_id = request_id or new_id("req")
        headers = dict(extra or {})
        if retry_after is not None:
            headers.setdefault("retry-after", _seconds(retry_after))
        body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}
        self._send_json(status, body, request_id=request_id, extra=headers)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
