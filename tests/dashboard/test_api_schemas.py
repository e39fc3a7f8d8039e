from typing import get_args

import pytest

from dashboard.api import schemas
from orchestrator.models import Agent, Checkpoint, Run


@pytest.mark.parametrize(
    ("literal", "choices"),
    [
        (schemas.RunStatus, Run.Status),
        (schemas.CheckpointStatus, Checkpoint.Status),
        (schemas.AgentStatus, Agent.Status),
        (schemas.AgentProvider, Agent.Provider),
        (schemas.FailurePolicy, Run.FailurePolicy),
    ],
)
def test_api_literals_list_exactly_the_models_choices(literal, choices):
    assert list(get_args(literal)) == list(choices.values)
