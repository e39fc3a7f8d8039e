"""The MCP tool registry (DESIGN §10): tool servers, the tools they offer, and agents' grants."""

from __future__ import annotations

import shlex

from django.conf import settings
from django.db import models

from orchestrator.models.agents import Agent


class ToolServer(models.Model):
    """An MCP tool server in the registry: how to reach it and the tools it offers.

    stdio: ``command`` and ``args`` start it as a child process that receives only the
    environment declared here (``env_sealed``: NAME=VALUE pairs encrypted at rest, see
    orchestrator/governance/secrets.py; ``env_names`` lists the names, which are all that is ever
    shown). Streamable HTTP: ``url``, and ``headers`` as {header name: environment variable name}:
    the values are read from the worker's environment when connecting, never stored.
    Changed only through orchestrator/governance/tool_registry.py, which audits every change.
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio"
        HTTP = "http", "streamable HTTP"

    class Status(models.TextChoices):
        READY = "ready"  # its tools were discovered at the last registration or refresh
        UNREACHABLE = "unreachable"  # the last refresh could not start it or speak MCP with it

    name = models.SlugField(max_length=64, unique=True)
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env_names = models.JSONField(default=list, blank=True, help_text="Names of the declared environment variables")
    env_sealed = models.TextField(blank=True, editable=False, help_text="The declared environment, encrypted")
    url = models.URLField(max_length=500, blank=True)
    headers = models.JSONField(default=dict, blank=True, help_text="{header: environment variable holding its value}")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.READY)
    status_message = models.CharField(max_length=500, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def endpoint(self) -> str:
        """What it runs or where it listens, without secrets: the command line (quoted as a shell
        would read it back: `python -c 'import sys'`), or the URL."""
        if self.transport == self.Transport.HTTP:
            return self.url
        return shlex.join([self.command, *(str(arg) for arg in self.args or [])])


class Tool(models.Model):
    """One tool a server offered when it was last discovered (MCP tools/list)."""

    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="unique_tool_per_server")]
        ordering = ["server", "name"]

    def __str__(self) -> str:
        return f"{self.server.name}:{self.name}"


class ToolGrant(models.Model):
    """An agent may use a whole server (``tool`` empty) or one of its tools.

    A grant names the tool rather than pointing at the Tool row, so that a refresh that no
    longer finds a tool does not silently delete who was allowed to use it. With
    ``requires_approval`` each call waits for a person's decision.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tool_grants")
    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="grants")
    tool = models.CharField(max_length=128, blank=True, help_text="Empty: every tool of the server")
    requires_approval = models.BooleanField(default=False)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    granted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "server", "tool"], name="unique_tool_grant")]
        ordering = ["agent", "server", "tool"]

    def __str__(self) -> str:
        return f"{self.agent.name} → {self.target}"

    @property
    def target(self) -> str:
        """SERVER or SERVER:TOOL, as the commands write it."""
        return f"{self.server.name}:{self.tool}" if self.tool else self.server.name
