"""Every boundary, every persona: dashboard views, API operations and the run websocket.

The views are enumerated from the URL resolver and the API operations from the OpenAPI schema:
a new view or operation that is missing from the tables below fails `test_every_*_is_in_the_table`
until someone states which permission guards it. Each persona then calls each one; a persona
without the permission gets 403 (401 on the API when anonymous; the login page for an anonymous
browser) and the denial is in the audit log; a persona with it gets through.

Personas (tests/conftest.py): anonymous, outsider (logged in, no role), viewer, launcher,
approver, agent_admin.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from dashboard.api import api
from orchestrator.engine import runs
from orchestrator.governance import tokens
from orchestrator.models import Event
from tests.conftest import PERSONAS

VIEW_RUN = "orchestrator.view_run"
LAUNCH_RUN = "orchestrator.launch_run"
CONTROL_RUN = "orchestrator.control_run"
DECIDE = "orchestrator.decide_checkpoint"
VIEW_AGENT = "orchestrator.view_agent"
VIEW_CHECKPOINT = "orchestrator.view_checkpoint"
ADD_AGENT = "orchestrator.add_agent"
CHANGE_AGENT = "orchestrator.change_agent"
PUBLIC = "public"

# Which persona holds which permission (the roles of migration 0006_roles).
HOLDS = {
    "anonymous": set(),
    "outsider": set(),
    "viewer": {VIEW_RUN, VIEW_AGENT, VIEW_CHECKPOINT},
    "launcher": {VIEW_RUN, VIEW_AGENT, VIEW_CHECKPOINT, LAUNCH_RUN, CONTROL_RUN},
    "approver": {VIEW_RUN, VIEW_AGENT, VIEW_CHECKPOINT, DECIDE},
    "agent_admin": {VIEW_AGENT, ADD_AGENT, CHANGE_AGENT},
}

# Dashboard views by URL name: the methods they answer and the permission that guards them.
VIEWS = {
    "home": (["GET"], VIEW_RUN),
    "runs": (["GET"], VIEW_RUN),
    "runs_table": (["GET"], VIEW_RUN),
    "new_run": (["GET", "POST"], LAUNCH_RUN),
    "preflight": (["GET", "POST"], LAUNCH_RUN),
    "approvals": (["GET"], DECIDE),
    "approvals_count": (["GET"], DECIDE),
    "approval_approve": (["POST"], DECIDE),
    "approval_reject": (["POST"], DECIDE),
    "health": (["GET"], PUBLIC),
    "favicon": (["GET"], PUBLIC),
    "run_detail": (["GET"], VIEW_RUN),
    "run_graph": (["GET"], VIEW_RUN),
    "run_events": (["GET"], VIEW_RUN),
    "run_event_tasks": (["GET"], VIEW_RUN),
    "run_download_md": (["GET"], VIEW_RUN),
    "run_download_json": (["GET"], VIEW_RUN),
    "run_task": (["GET"], VIEW_RUN),
    "run_task_output": (["GET"], VIEW_RUN),
    "run_attempt": (["GET"], VIEW_RUN),
    "run_artifact": (["GET"], VIEW_RUN),
    "run_pause": (["POST"], CONTROL_RUN),
    "run_resume": (["POST"], CONTROL_RUN),
    "run_cancel": (["POST"], CONTROL_RUN),
    "run_budget": (["POST"], CONTROL_RUN),
    "run_task_retry": (["POST"], CONTROL_RUN),
    "run_task_skip": (["POST"], CONTROL_RUN),
    "run_checkpoint_decide": (["POST"], DECIDE),
    "run_plan_edit": (["POST"], DECIDE),
    "run_plan_remove": (["POST"], DECIDE),
    "run_launch_again": (["POST"], LAUNCH_RUN),
    "run_task_rerun": (["POST"], CONTROL_RUN),
    "new_run_check": (["POST"], LAUNCH_RUN),
    "plans": (["GET"], VIEW_RUN),
    "plan_detail": (["GET"], VIEW_RUN),
    "plan_document": (["GET"], VIEW_RUN),
    # Folders of longer URLs: they send to the page that shows them (nothing trimmed is a 404).
    "approval": (["GET"], VIEW_RUN),
    "run_tasks": (["GET"], VIEW_RUN),
    "run_task_attempts": (["GET"], VIEW_RUN),
    "run_artifacts": (["GET"], VIEW_RUN),
    "run_checkpoints": (["GET"], VIEW_RUN),
    "run_checkpoint": (["GET"], VIEW_RUN),
    "run_plan_subtasks": (["GET"], VIEW_RUN),
    "run_plan_subtask": (["GET"], VIEW_RUN),
}
# Route prefixes with their own, separately tested, guards: the admin (staff + model
# permissions, tests/orchestrator/test_admin.py), the API (below) and Django's login views.
OWN_GUARDS = ("admin/", "api/", "accounts/")

# API operations: the permission and a valid body (so that the permission decides, not validation).
API = {
    ("GET", "/api/runs"): (VIEW_RUN, None),
    ("POST", "/api/runs"): (LAUNCH_RUN, lambda w: {"plan_id": w["plan"]}),
    ("GET", "/api/runs/{run_id}"): (VIEW_RUN, None),
    ("POST", "/api/runs/{run_id}/pause"): (CONTROL_RUN, None),
    ("POST", "/api/runs/{run_id}/resume"): (CONTROL_RUN, None),
    ("POST", "/api/runs/{run_id}/cancel"): (CONTROL_RUN, None),
    ("POST", "/api/runs/{run_id}/budget"): (CONTROL_RUN, lambda w: {"budget_usd": "7.25"}),
    ("GET", "/api/runs/{run_id}/events"): (VIEW_RUN, None),
    ("POST", "/api/tasks/{task_id}/retry"): (CONTROL_RUN, None),
    ("POST", "/api/tasks/{task_id}/skip"): (CONTROL_RUN, lambda w: {"reason": "not needed"}),
    ("GET", "/api/checkpoints"): (VIEW_CHECKPOINT, None),
    ("POST", "/api/checkpoints/{checkpoint_id}/approve"): (DECIDE, lambda w: {"comment": "ok"}),
    ("POST", "/api/checkpoints/{checkpoint_id}/reject"): (DECIDE, lambda w: {"comment": "no"}),
    ("GET", "/api/agents"): (VIEW_AGENT, None),
    ("POST", "/api/agents"): (ADD_AGENT, lambda w: {"name": "new-agent", "provider": "simulated"}),
    ("PATCH", "/api/agents/{name}"): (CHANGE_AGENT, lambda w: {"role": "Reads a lot"}),
}


# --- The world each call acts on ------------------------------------------------------------------


@pytest.fixture
def world(personas, make_agent, make_plan):
    """A run awaiting plan approval, launched by someone who is none of the personas."""
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    someone = User.objects.create_user("someone")
    run = runs.launch(plan, launched_by=someone, require_plan_approval=True)
    return {
        "plan": plan.pk,
        "plan_id": plan.pk,
        "run_id": run.pk,
        "task_id": run.tasks.get(subtask__key="a").pk,
        "checkpoint_id": run.checkpoints.get().pk,
        "key": "a",
        "token": "no-such-draft",
        "name": "researcher",
        "number": 1,
    }


def url_patterns(resolvers=None, prefix=""):
    """(route, name, pattern) for every URL the project answers, included URLconfs flattened."""
    for entry in resolvers if resolvers is not None else get_resolver().url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from url_patterns(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            yield route, entry.name, entry


def dashboard_views() -> dict[str, str]:
    return {name: route for route, name, _ in url_patterns() if not route.startswith(OWN_GUARDS)}


def test_every_view_is_in_the_table():
    """A view missing here has no stated guard: add it to VIEWS with its methods and permission."""
    found = dashboard_views()
    assert None not in found, f"URL patterns without a name cannot be checked: {found[None]}"
    missing = sorted(set(found) - set(VIEWS))
    assert not missing, f"views with no permission entry in VIEWS: {missing}"
    gone = sorted(set(VIEWS) - set(found))
    assert not gone, f"VIEWS lists views that no longer exist: {gone}"


def test_every_api_operation_is_in_the_table():
    schema = api.get_openapi_schema()
    found = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert found == set(API), f"missing from API: {sorted(found - set(API))}; stale: {sorted(set(API) - found)}"


def view_url(name: str, world: dict) -> str:
    route = dashboard_views()[name]
    keys = ("run_id", "task_id", "checkpoint_id", "key", "token", "plan_id", "number", "name")
    kwargs = {key: world[key] for key in keys if f":{key}>" in route}
    return reverse(name, kwargs=kwargs)


def denials() -> list[Event]:
    return list(Event.objects.filter(type="access.denied").order_by("id"))


def client_for(persona: str, users) -> Client:
    client = Client()
    if users[persona] is not None:
        client.force_login(users[persona])
    return client


CASES = [(name, method, persona) for name, (methods, _) in VIEWS.items() for method in methods for persona in PERSONAS]


@pytest.mark.parametrize("name, method, persona", CASES)
def test_view_boundary(name, method, persona, personas, world):
    methods, permission = VIEWS[name]
    client = client_for(persona, personas)
    url = view_url(name, world)
    before = len(denials())
    response = client.get(url) if method == "GET" else client.post(url, {"comment": "because"})
    new = denials()[before:]
    if permission == PUBLIC:
        assert response.status_code not in (302, 401, 403), response.status_code
        assert not new
    elif persona == "anonymous":
        assert response.status_code == 302 and response.url.startswith(reverse("login")), response.status_code
        assert not new  # a browser without a session is sent to log in, not refused
    elif permission in HOLDS[persona]:
        assert response.status_code not in (401, 403), f"{persona} refused {method} {url}: {response.status_code}"
        assert not (response.status_code == 302 and response.url.startswith(reverse("login")))
        assert not new, [e.message for e in new]
    else:
        assert response.status_code == 403, f"{persona} got {response.status_code} for {method} {url}"
        assert len(new) == 1, f"{persona}'s denial of {method} {url} was not audited"
        assert new[0].actor_user == personas[persona] and new[0].payload["permission"] == permission
        assert new[0].payload["action"] == f"{method} {url}"


API_CASES = [(method, path, persona) for (method, path) in API for persona in PERSONAS]


@pytest.mark.parametrize("method, path, persona", API_CASES)
def test_api_boundary(method, path, persona, personas, world):
    permission, body = API[(method, path)]
    client = Client()
    headers = {}
    if personas[persona] is not None:
        _, raw = tokens.issue(personas[persona], "boundary test")
        headers["HTTP_AUTHORIZATION"] = f"Bearer {raw}"
    url = path.format(**world)
    before = len(denials())
    if method == "GET":
        response = client.get(url, **headers)
    else:
        data = json.dumps(body(world) if body else {})
        send = client.patch if method == "PATCH" else client.post
        response = send(url, data, content_type="application/json", **headers)
    new = denials()[before:]
    if persona == "anonymous":
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"
        assert len(new) == 1 and new[0].actor_name == "anonymous"
    elif permission in HOLDS[persona]:
        assert response.status_code not in (401, 403), f"{persona}: {response.status_code} {response.content[:300]}"
        assert not new
    else:
        assert response.status_code == 403, f"{persona} got {response.status_code} for {method} {url}"
        assert response.json()["error"]["code"] == "permission_denied"
        assert len(new) == 1 and new[0].actor_user == personas[persona]
        assert new[0].payload == {"permission": permission, "action": f"{method} {url}"}


# --- Websocket ------------------------------------------------------------------------------------


def connect(run_id: int, user, *, origin: str = "http://localhost"):
    """Open /ws/runs/<id>/ through the project's ASGI application as `user` (None: no session)."""
    from glassbox.asgi import application

    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))

    async def attempt():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=headers)
        connected, code = await communicator.connect(timeout=10)
        if connected and not await communicator.receive_nothing(timeout=0.3):
            closing = await communicator.receive_output()
            if closing["type"] == "websocket.close":  # accepted, then refused with a close code
                return False, closing["code"]
        await communicator.disconnect()
        return connected, code

    return async_to_sync(attempt)()


@pytest.mark.parametrize("persona", PERSONAS)
def test_websocket_boundary(persona, transactional_db, personas, world):
    before = len(denials())
    connected, code = connect(world["run_id"], personas[persona])
    new = denials()[before:]
    if VIEW_RUN in HOLDS[persona]:
        assert connected, f"{persona} could not watch the run (close code {code})"
        assert not new
    elif persona == "anonymous":
        assert not connected and code == 4401, f"anonymous: connected={connected}, code={code}"
        assert len(new) == 1 and new[0].actor_name == "anonymous", "the anonymous attempt was not audited"
    else:
        assert not connected and code == 4403, f"{persona}: connected={connected}, code={code}"
        assert len(new) == 1, f"{persona}'s refused websocket was not audited"
        assert new[0].actor_user == personas[persona] and new[0].payload["permission"] == VIEW_RUN


def test_websocket_from_a_foreign_origin_is_refused(transactional_db, personas, world):
    connected, _ = connect(world["run_id"], personas["viewer"], origin="https://evil.example")
    assert not connected
