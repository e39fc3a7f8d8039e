"""The Django admin as the governance console (DESIGN §1 J6, §6), one module per family of pages.

``agents`` (the registry and provider limits), ``tools`` (tool servers and grants), ``plans``
(plans and the planner's answers), ``runs`` (runs, task runs, attempts), ``checkpoints``,
``audit_log`` (the read-only Event log and its export), ``api_tokens`` and ``users`` (logins and
roles, Django's pages with each change audited); ``base`` holds what
they share (a refused page is written to the audit log). Django's admin autodiscovery imports
this package: importing the modules registers their ModelAdmins.
"""

from orchestrator.admin import agents, api_tokens, audit_log, checkpoints, plans, runs, tools, users  # noqa: F401
