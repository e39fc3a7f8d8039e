"""The fake Messages API: the wire format the SDK expects, scripting, limits, the command.

Raw HTTP checks the exact event stream (names, order, shapes); the official SDK checks that a
real client parses every answer (text, tool calls, errors) as it parses the real API's.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import subprocess
import sys
import time
from datetime import UTC, datetime

import anthropic
import pytest

from orchestrator.providers.anthropic import SDK_ERRORS
from orchestrator.providers.fake_anthropic import (
    FakeAnthropicServer,
    RateLimits,
    Reply,
    count_input_tokens,
    default_text,
)
from tests.conftest import ROOT, child_env

KEY = "test-key-for-the-fake-server"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}


@pytest.fixture
def server():
    with FakeAnthropicServer() as fake:
        yield fake


def post(server: FakeAnthropicServer, path: str, body, headers=None) -> tuple[int, dict[str, str], bytes]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, body=payload, headers=HEADERS if headers is None else headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def get(server: FakeAnthropicServer, path: str) -> dict:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", path)
    data = json.loads(connection.getresponse().read())
    connection.close()
    return data


def sse_events(data: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in data.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def client(server: FakeAnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0, timeout=10)


def request_body(**extra) -> dict:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "Plan a picnic for six"}],
        **extra,
    }


# --- The event stream ------------------------------------------------------------------------------


def test_a_text_stream_sends_the_apis_events_in_order(server):
    status, headers, data = post(server, "/v1/messages", request_body(stream=True))
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["request-id"].startswith("req_")
    events = sse_events(data)
    names = [name for name, _ in events]
    deltas = names.count("content_block_delta")
    assert deltas >= 2
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    for name, payload in events:
        assert payload["type"] == name
    message = events[0][1]["message"]
    assert message["role"] == "assistant" and message["content"] == [] and message["stop_reason"] is None
    assert message["model"] == "claude-sonnet-4-6" and message["id"].startswith("msg_")
    assert message["usage"]["output_tokens"] == 1
    assert events[1][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    text = "".join(p["delta"]["text"] for n, p in events if n == "content_block_delta")
    assert all(p["delta"]["type"] == "text_delta" and p["index"] == 0 for n, p in events if n == "content_block_delta")
    assert text == default_text(request_body())
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == len(text.split())
    assert final["usage"]["input_tokens"] == message["usage"]["input_tokens"] == count_input_tokens(request_body())


def test_the_default_answer_is_deterministic_and_stops_at_max_tokens(server):
    sdk = client(server)
    first = sdk.messages.create(**request_body())
    second = sdk.messages.create(**request_body())
    assert first.content[0].text == second.content[0].text
    short = sdk.messages.create(**request_body(max_tokens=5))
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 5
    assert len(short.content[0].text.split()) == 5


def test_the_sdk_streams_a_scripted_answer_with_exact_usage(server):
    server.enqueue(
        Reply.text_answer(
            "one two three four five six seven",
            input_tokens=321,
            output_tokens=9,
            cache_read_tokens=40,
            cache_creation_tokens=7,
        )
    )
    with client(server).messages.stream(**request_body()) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "one two three four five six seven"
    usage = final.usage
    assert (usage.input_tokens, usage.output_tokens) == (321, 9)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (40, 7)


def test_a_stream_that_fails_half_way_ends_with_an_error_event(server):
    server.enqueue(Reply.stream_error("overloaded_error", after_words=4))
    _, _, data = post(server, "/v1/messages", request_body(stream=True))
    events = sse_events(data)
    assert events[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    names = [name for name, _ in events]
    assert "message_stop" not in names and "message_delta" not in names
    sent = "".join(p["delta"]["text"] for n, p in events if n == "content_block_delta")
    assert len(sent.split()) == 4

    server.enqueue(Reply.stream_error("api_error", "Internal server error", after_words=2))
    with pytest.raises(anthropic.APIStatusError) as raised:
        with client(server).messages.stream(**request_body()) as stream:
            for _ in stream:
                pass
    assert raised.value.type == "api_error" and raised.value.api_message == "Internal server error"


def test_a_dropped_connection_gives_no_answer_at_all(server):
    server.enqueue(Reply.dropped(after_words=3), Reply.dropped())
    # Mid-stream the SDK lets its HTTP client's error through (httpx2.RemoteProtocolError).
    with pytest.raises(SDK_ERRORS):
        with client(server).messages.stream(**request_body()) as stream:
            for _ in stream:
                pass
    with pytest.raises(anthropic.APIConnectionError):
        client(server).messages.create(**request_body())
    assert client(server).messages.create(**request_body()).content[0].type == "text"  # the server is fine


def test_a_client_resetting_a_kept_alive_connection_ends_it_quietly(server, capsys):
    """A client that closes with unread bytes, or dies, resets its connection: the server ends it
    as the end of that connection, without a traceback in the log (as a real server would)."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"GET /_fake/requests HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    sock.close()
    deadline = time.monotonic() + 10
    while server._connections and time.monotonic() < deadline:  # its handler has ended
        time.sleep(0.01)
    assert not server._connections
    assert "Traceback" not in capsys.readouterr().err


def test_a_tool_call_streams_its_input_as_json_deltas(server):
    plan = {"subtasks": [{"key": "a", "agent": "researcher", "title": "A", "instructions": "x", "depends_on": []}]}
    server.enqueue(Reply.tool_call("submit_plan", plan))
    _, _, data = post(
        server,
        "/v1/messages",
        request_body(stream=True, tools=[{"name": "submit_plan", "input_schema": {"type": "object"}}]),
    )
    events = sse_events(data)
    start = events[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "submit_plan" and start["input"] == {}
    assert start["id"].startswith("toolu_")
    deltas = [p["delta"] for n, p in events if n == "content_block_delta"]
    assert deltas[0] == {"type": "input_json_delta", "partial_json": ""}
    assert json.loads("".join(d["partial_json"] for d in deltas)) == plan
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

    server.enqueue(Reply.tool_call("submit_plan", plan))
    message = client(server).messages.create(
        **request_body(tools=[{"name": "submit_plan", "input_schema": {"type": "object"}}])
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use" and message.content[0].input == plan


def test_a_scripted_malformed_tool_input_is_streamed_as_is(server):
    server.enqueue(Reply.tool_call("submit_plan", raw_json='{"subtasks": [{"key": "a",'))
    _, _, data = post(
        server,
        "/v1/messages",
        request_body(stream=True, tools=[{"name": "submit_plan", "input_schema": {"type": "object"}}]),
    )
    sent = "".join(p["delta"]["partial_json"] for n, p in sse_events(data) if n == "content_block_delta")
    assert sent == '{"subtasks": [{"key": "a",'


def test_a_forced_tool_without_a_script_gets_the_smallest_valid_input(server):
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "kind": {"enum": ["b", "c"]},
                        "n": {"type": "integer", "minimum": 3},
                    },
                    "required": ["name", "kind", "n"],
                },
            },
            "note": {"type": "string"},
        },
        "required": ["items"],
    }
    message = client(server).messages.create(
        **request_body(tools=[{"name": "make", "input_schema": schema}], tool_choice={"type": "tool", "name": "make"})
    )
    assert message.content[0].input == {"items": [{"name": "example", "kind": "b", "n": 3}]}


# --- Errors, scripting and the API's own refusals ----------------------------------------------------


def test_scripted_errors_come_first_in_first_out_with_retry_after(server):
    server.enqueue(Reply.error(429, retry_after=7), Reply.error(529), Reply.text_answer("fine"))
    sdk = client(server)
    with pytest.raises(anthropic.RateLimitError) as limited:
        sdk.messages.create(**request_body())
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.type == "rate_limit_error"
    assert limited.value.body["request_id"] == limited.value.request_id
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        sdk.messages.create(**request_body())
    assert overloaded.value.status_code == 529 and overloaded.value.type == "overloaded_error"
    assert sdk.messages.create(**request_body()).content[0].text == "fine"
    assert sdk.messages.create(**request_body()).content[0].text == default_text(request_body())
    assert server.pending() == 0


def test_the_api_refuses_what_the_real_one_refuses(server):
    status, _, data = post(server, "/v1/messages", request_body(), headers={"anthropic-version": "2023-06-01"})
    assert status == 401 and json.loads(data)["error"]["type"] == "authentication_error"
    status, _, data = post(server, "/v1/messages", request_body(), headers={"x-api-key": KEY})
    assert status == 400 and "anthropic-version" in json.loads(data)["error"]["message"]
    body = request_body()
    del body["max_tokens"]
    status, _, data = post(server, "/v1/messages", body)
    assert status == 400 and json.loads(data)["error"]["message"] == "max_tokens: Field required"
    status, _, data = post(server, "/v1/messages", b"{not json")
    assert status == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
    status, _, _ = post(server, "/v1/messages", request_body(tool_choice={"type": "tool", "name": "missing"}))
    assert status == 400


def test_a_server_with_a_key_refuses_other_keys():
    with FakeAnthropicServer(api_key="the-right-key") as fake:
        with pytest.raises(anthropic.AuthenticationError):
            client(fake).messages.create(**request_body())
        ok = anthropic.Anthropic(api_key="the-right-key", base_url=fake.url, max_retries=0)
        assert ok.messages.create(**request_body()).content[0].type == "text"


def test_count_tokens_agrees_with_the_messages_usage(server):
    sdk = client(server)
    body = request_body(system="You plan picnics.")
    counted = sdk.messages.count_tokens(model=body["model"], system=body["system"], messages=body["messages"])
    message = sdk.messages.create(**body)
    assert counted.input_tokens == message.usage.input_tokens == count_input_tokens(body)


def test_replies_can_be_scripted_over_http_and_requests_never_keep_the_key(server):
    status, _, data = post(
        server, "/_fake/replies", {"replies": [Reply.text_answer("from afar").to_dict()]}, headers={}
    )
    assert status == 200 and json.loads(data) == {"queued": 1, "pending": 1}
    assert client(server).messages.create(**request_body()).content[0].text == "from afar"
    recorded = get(server, "/_fake/requests")["requests"]
    assert recorded[-1]["path"] == "/v1/messages" and recorded[-1]["body"]["model"] == "claude-sonnet-4-6"
    credential = recorded[-1]["headers"].get("x-api-key") or recorded[-1]["headers"].get("authorization")
    assert credential == "[present]"
    assert KEY not in json.dumps(recorded)
    status, _, data = post(server, "/_fake/replies", {"replies": [{"kind": "nonsense"}]}, headers={})
    assert status == 400 and "kind" in json.loads(data)["error"]
    post(server, "/_fake/reset", {}, headers={})
    assert get(server, "/_fake/requests")["requests"] == []


# --- Rate limits -----------------------------------------------------------------------------------


def test_rate_limit_headers_count_down_and_reset_in_rfc3339(server):
    _, first, _ = post(server, "/v1/messages", request_body())
    _, second, _ = post(server, "/v1/messages", request_body())
    for name in ("requests", "tokens", "input-tokens", "output-tokens"):
        for suffix in ("limit", "remaining", "reset"):
            assert f"anthropic-ratelimit-{name}-{suffix}" in second
    assert first["anthropic-ratelimit-requests-limit"] == "50"
    assert int(second["anthropic-ratelimit-requests-remaining"]) < int(first["anthropic-ratelimit-requests-remaining"])
    reset = datetime.fromisoformat(second["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00"))
    assert reset.tzinfo is not None and reset >= datetime.now(tz=UTC).replace(microsecond=0)


def test_enforced_limits_answer_429_without_using_up_a_scripted_reply():
    with FakeAnthropicServer(limits=RateLimits(requests_per_minute=2), enforce_limits=True) as fake:
        sdk = client(fake)
        sdk.messages.create(**request_body())
        sdk.messages.create(**request_body())
        fake.enqueue(Reply.text_answer("kept for later"))
        with pytest.raises(anthropic.RateLimitError) as raised:
            sdk.messages.create(**request_body())
        headers = raised.value.response.headers
        assert headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert float(headers["retry-after"]) >= 1
        assert fake.pending() == 1


# --- The management command ------------------------------------------------------------------------


def test_the_command_serves_the_fake_api_until_stopped():
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "fake_anthropic", "--port", "0", "--chunk-delay", "0"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first_line = process.stdout.readline()
        assert first_line.startswith("Fake Anthropic Messages API on http://127.0.0.1:"), first_line
        url = first_line.split(" on ", 1)[1].strip()
        sdk = anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0, timeout=10)
        assert "fake Anthropic API" in sdk.messages.create(**request_body()).content[0].text
    finally:
        process.terminate()
        process.wait(timeout=10)


# --- Tool use: parallel calls, results, the API's pairing rule ---------------------------------------

CALCULATE = {
    "name": "calculate",
    "description": "Evaluate arithmetic",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string", "examples": ["(17.5 - 2) * 3", "sqrt(2) * 100"]}},
        "required": ["expression"],
    },
}
LOOKUP = {
    "name": "lookup",
    "description": "Look a city up",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_several_tool_calls_in_one_message_are_accumulated_by_the_sdk_stream(server):
    server.enqueue(
        Reply.tool_calls(("lookup", {"city": "Oslo"}), ("calculate", {"expression": "1 + 2" * 20}), text="Checking.")
    )
    seen_json = []
    with client(server).messages.stream(**request_body(tools=[LOOKUP, CALCULATE])) as stream:
        for event in stream:
            if event.type == "input_json":
                seen_json.append(event.partial_json)
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    first, second = message.content[1], message.content[2]
    assert (first.name, first.input) == ("lookup", {"city": "Oslo"})
    assert (second.name, second.input) == ("calculate", {"expression": "1 + 2" * 20})
    assert first.id != second.id and first.id.startswith("toolu_")
    assert len(seen_json) > 2  # the input arrived in pieces (input_json_delta) and the SDK joined them


def test_the_raw_stream_has_one_block_per_tool_call_in_the_apis_order(server):
    server.enqueue(Reply.tool_calls(("lookup", {"city": "Oslo"}), ("lookup", {"city": "Rome"})))
    status, _, data = post(server, "/v1/messages", request_body(stream=True, tools=[LOOKUP]))
    events = sse_events(data)
    starts = [e for name, e in events if name == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"], s["content_block"]["input"]) for s in starts] == [
        (0, "tool_use", {}),
        (1, "tool_use", {}),
    ]
    stops = [e["index"] for name, e in events if name == "content_block_stop"]
    assert status == 200 and stops == [0, 1]
    deltas = [e["delta"]["type"] for name, e in events if name == "content_block_delta"]
    assert set(deltas) == {"input_json_delta"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-1][0] == "message_stop"


def test_tool_results_are_accepted_and_answered_in_the_next_request(server):
    sdk = client(server)
    first = sdk.messages.create(**request_body(tools=[CALCULATE]))
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.input["expression"] in ("(17.5 - 2) * 3", "sqrt(2) * 100")  # from the schema's examples
    conversation = [
        *request_body()["messages"],
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "46.5"}]},
    ]
    with sdk.messages.stream(**request_body(tools=[CALCULATE], messages=conversation)) as stream:
        second = stream.get_final_message()
    assert second.stop_reason == "end_turn"
    assert "calculate → 46.5" in second.content[0].text


def test_unscripted_tool_calls_are_deterministic_and_follow_tool_calls_per_turn():
    with FakeAnthropicServer(tool_calls_per_turn=2) as fake:
        sdk = client(fake)
        body = request_body(tools=[LOOKUP, CALCULATE])
        answers = [sdk.messages.create(**body) for _ in range(2)]
        assert [[(b.name, b.input) for b in a.content if b.type == "tool_use"] for a in answers][0] == [
            (b.name, b.input) for b in answers[1].content if b.type == "tool_use"
        ]
        assert [b.name for b in answers[0].content if b.type == "tool_use"] == ["lookup", "calculate"]
        assert sdk.messages.create(**body, tool_choice={"type": "none"}).stop_reason == "end_turn"
    with FakeAnthropicServer(tool_calls_per_turn=0) as fake:
        assert client(fake).messages.create(**request_body(tools=[LOOKUP])).stop_reason == "end_turn"
        assert (
            client(fake).messages.create(**request_body(tools=[LOOKUP], tool_choice={"type": "any"})).stop_reason
            == "tool_use"
        )


def test_a_tool_call_left_without_its_result_is_refused_as_the_api_does(server):
    conversation = [
        {"role": "user", "content": "Look Oslo up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}]},
        {"role": "user", "content": "never mind"},
    ]
    with pytest.raises(anthropic.BadRequestError, match="toolu_1"):
        client(server).messages.create(**request_body(tools=[LOOKUP], messages=conversation))
    stray = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_unknown", "content": "x"}]},
    ]
    status, _, data = post(server, "/v1/messages", request_body(tools=[LOOKUP], messages=stray))
    assert status == 400 and "unexpected `tool_use_id`" in json.loads(data)["error"]["message"]


def test_tool_calls_can_be_scripted_from_another_process(server):
    reply = Reply.tool_calls(("lookup", {"city": "Lima"}), text="One moment.")
    status, _, _ = post(server, "/_fake/replies", {"replies": [reply.to_dict()]})
    assert status == 200
    message = client(server).messages.create(**request_body(tools=[LOOKUP]))
    assert [(b.type, getattr(b, "input", None)) for b in message.content] == [
        ("text", None),
        ("tool_use", {"city": "Lima"}),
    ]


def test_count_tokens_counts_tools_and_tool_results(server):
    sdk = client(server)
    plain = sdk.messages.count_tokens(model="claude-sonnet-4-6", messages=request_body()["messages"]).input_tokens
    with_tools = sdk.messages.count_tokens(
        model="claude-sonnet-4-6", messages=request_body()["messages"], tools=[LOOKUP, CALCULATE]
    ).input_tokens
    assert with_tools > plain
