"""Property-based fuzzing of the JSON API from its own OpenAPI schema (schemathesis).

Every operation gets generated requests, valid and invalid, sent in-process through Django's
WSGI handler with an API token of a user who holds every permission. The properties: no 5xx
answer, every status code and content type is one the schema documents, every body matches
the documented schema (errors included), and no schema mismatch: a request the schema forbids
is refused, one it allows is accepted unless a rule no schema can state refuses it. Examples
are bounded (GLASSBOX_FUZZ_EXAMPLES per operation) and derandomized so that CI runs are short
and repeatable; this file runs in `make test` and `make test-services`, hence in `.ci/run`.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.engine import runs
from orchestrator.governance import tokens

# Examples per operation: CI's bound (a couple of minutes for the whole API on 2 cores); raise it
# locally for a longer hunt, e.g. GLASSBOX_FUZZ_EXAMPLES=1000.
FUZZ_EXAMPLES = int(os.environ.get("GLASSBOX_FUZZ_EXAMPLES", "100"))

# Refusals no schema can express: a plan document that is no valid plan or is over its budget,
# an agent whose provider options its provider refuses, an action the run's state forbids, an id
# that names nothing.
RULE_REFUSALS = {
    (422, "invalid_plan"),
    (422, "launch_refused"),
    (422, "invalid_agent"),
    (409, "action_refused"),
    (404, "not_found"),
}


@schemathesis.check
def positive_data_accepted_unless_a_rule_refuses(ctx, response, case):
    """schemathesis' positive_data_acceptance, except for the refusals of RULE_REFUSALS."""
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    if (response.status_code, code) in RULE_REFUSALS:
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    # The schema says what is valid: the API must refuse what it forbids, and accept what it
    # allows unless a rule beyond any schema refuses it (see below).
    negative_data_rejection,
    positive_data_accepted_unless_a_rule_refuses,
]


@pytest.fixture
def fuzz_token(db, demo_agents, priced_limit, make_plan):
    """A token with every permission, and a few rows for ids 1, 2, 3 ... to find."""
    user = User.objects.create_superuser("fuzzer")
    other = User.objects.create_user("other")
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"], {"gate": "before"})})
    runs.launch(plan, launched_by=other, require_plan_approval=True)
    runs.launch(plan, launched_by=user)
    _, raw = tokens.issue(user, "fuzz")
    return raw


@pytest.fixture
def wsgi_app(db):
    """Django's WSGI handler inside the test's transaction (as the test client does: it must not
    close the database connection at the end of each request)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield schema.app
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def load_schema():
    """The schema /api/openapi.json serves, bound to the WSGI app (loaded at collection: no database
    needed; schemathesis' lazy fixture loader does not work with pytest 9)."""
    from dashboard.api import api

    loaded = schemathesis.openapi.from_dict(api.get_openapi_schema())
    loaded.app = get_wsgi_application()
    return loaded


schema = load_schema()


@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_never_errors_and_matches_its_schema(case, wsgi_app, fuzz_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_token}"}, checks=CHECKS)
