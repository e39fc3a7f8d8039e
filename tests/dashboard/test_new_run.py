"""New run: the form, the preflight (validation, DAG, cost, duration) and Launch, with permissions.

Nothing may be saved before Launch; Launch saves the plan and starts the run together, or neither.
"""

from __future__ import annotations

import html as html_module
import re
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.models import Agent, Attempt, Event, Plan, Run, Subtask, TaskRun
from tests.conftest import ROOT, grant_with_approval

pytestmark = pytest.mark.django_db

FEATURE_PIPELINE = ROOT / "examples" / "feature_pipeline.yaml"
FEATURE_ESTIMATE = (
    "$0.1332"  # (10,100 estimated + 8,700 received input tokens × $3 + 5 × 1,024 output tokens × $15) per million
)
# received: three summaries of 220 tokens (200 + their headings) and the review's fan-in of full outputs (8,040)


def upload(text: str | bytes, name: str = "plan.yaml") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode() if isinstance(text, str) else text, content_type="application/yaml")


def form_data(**overrides) -> dict:
    data = {"source": "file", "goal": "", "cap": "4", "budget_usd": "0.50", "failure_policy": "continue"}
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def pipeline_upload() -> SimpleUploadedFile:
    return upload(FEATURE_PIPELINE.read_bytes(), FEATURE_PIPELINE.name)


@pytest.fixture
def launcher_client(client, personas, demo_agents, priced_limit):
    client.force_login(personas["launcher"])
    return client


def check(client, **overrides) -> str:
    """POST the New-run form; the preflight URL it redirects to."""
    response = client.post("/runs/new/", form_data(**overrides))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert re.fullmatch(r"/runs/new/[\w-]+/", response["Location"])
    return response["Location"]


def nothing_saved() -> bool:
    return not Plan.objects.exists() and not Run.objects.exists()


# --- Permissions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url"),
    [("get", "/runs/new/"), ("post", "/runs/new/"), ("get", "/runs/new/abc/"), ("post", "/runs/new/abc/")],
)
def test_anonymous_is_sent_to_the_login_page(client, method, url):
    response = getattr(client, method)(url)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={url}")


@pytest.mark.parametrize("persona", ["outsider", "viewer", "approver"])
def test_without_launch_run_the_form_is_403_and_audited(client, personas, demo_agents, persona):
    client.force_login(personas[persona])
    assert client.get("/runs/new/").status_code == 403
    response = client.post("/runs/new/", {**form_data(), "plan_file": pipeline_upload()})
    assert response.status_code == 403
    assert nothing_saved()
    denials = Event.objects.filter(type="access.denied", actor_user=personas[persona])
    assert [e.payload["action"] for e in denials] == ["GET /runs/new/", "POST /runs/new/"]
    assert {e.payload["permission"] for e in denials} == {"orchestrator.launch_run"}


def test_without_launch_run_a_preflight_cannot_be_launched(client, personas, launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload())
    client.force_login(personas["viewer"])
    response = client.post(preflight_url, {**form_data(), "action": "launch"})
    assert response.status_code == 403
    assert not Run.objects.exists()
    assert Event.objects.filter(type="access.denied", payload__action=f"POST {preflight_url}").exists()


def test_a_draft_belongs_to_the_user_who_made_it(client, launcher_client, personas, django_user_model):
    preflight_url = check(launcher_client, plan_file=pipeline_upload())
    other = django_user_model.objects.create_user("other-launcher")
    other.groups.set(personas["launcher"].groups.all())
    client.force_login(other)
    response = client.post(preflight_url, {**form_data(), "action": "launch"}, follow=True)
    assert response.redirect_chain == [("/runs/new/", 302)]
    assert "expired or belongs to someone else" in response.text
    assert not Run.objects.exists()


# --- The form --------------------------------------------------------------------------------------


def test_the_form_offers_the_sources_and_run_settings_with_defaults(launcher_client, settings):
    response = launcher_client.get("/runs/new/")
    assert response.status_code == 200
    html = response.text
    for text in (
        'name="goal"',
        'name="plan_file"',
        'name="saved_plan"',
        'name="cap" value="4"',
        'name="budget_usd" value="0.50"',
        'value="fail_fast"',
        'name="require_plan_approval"',
        'enctype="multipart/form-data"',
    ):
        assert text in html
    assert 'value="planner"' in html  # orchestrator/plans/planner.py exists in this build


def test_the_planner_option_is_hidden_when_the_planner_module_is_absent(launcher_client, monkeypatch):
    monkeypatch.setattr("dashboard.forms.planner_available", lambda: False)
    html = launcher_client.get("/runs/new/").text
    assert 'value="planner"' not in html
    response = launcher_client.post("/runs/new/", form_data(source="planner", goal="Anything"))
    assert response.status_code == 200
    assert "Select a valid choice" in response.text


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({}, "plan_file", "Choose a plan file to upload."),
        ({"source": "saved"}, "saved_plan", "Choose one of the saved plans."),
        ({"source": "planner"}, "goal", "The planner needs a goal to plan for."),
        ({"cap": "0"}, "cap", "Cap must be a whole number from 1 to 1000, got 0."),
        ({"cap": "1001"}, "cap", "Cap must be a whole number from 1 to 1000, got 1001."),
        ({"budget_usd": "0"}, "budget_usd", "Budget must be from $0.0001 to $99,999,999.9999, got $0.00."),
        ({"failure_policy": "sometimes"}, "failure_policy", "Select a valid choice"),
    ],
)
def test_form_errors_name_the_field(launcher_client, overrides, field, message):
    response = launcher_client.post("/runs/new/", form_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in response.context["form"].errors[field])
    assert nothing_saved()


# --- Validation in plain words --------------------------------------------------------------------


def test_an_invalid_plan_lists_every_problem_and_saves_nothing(launcher_client):
    text = (
        "goal: Broken\nsubtasks:\n"
        "  - {key: a, agent: researcher, title: A, depends_on: [b]}\n"
        "  - {key: b, agent: reseacher, title: B, depends_on: [a], gate: sometimes}\n"
    )
    response = launcher_client.post("/runs/new/", {**form_data(), "plan_file": upload(text, "broken.yaml")})
    assert response.status_code == 200
    expected = plans.PlanValidationError
    with pytest.raises(expected) as raised:
        plans.validate_document(text)
    shown = response.context["preflight"].errors
    assert shown == raised.value.errors and len(shown) == 3
    html = response.text
    assert "3 problems in broken.yaml" in html
    assert "line 4: subtasks[1] (key &quot;b&quot;)" in html  # each problem with its line
    assert "cycle: a → b → a" in html
    assert "no agent named &quot;reseacher&quot; (did you mean &quot;researcher&quot;?)" in html
    assert "must be one of none, before, after, got &quot;sometimes&quot;" in html
    assert "Nothing was saved." in html
    assert nothing_saved()


def test_a_yaml_syntax_error_names_line_and_column(launcher_client):
    broken = upload("goal: [unclosed\nsubtasks: []\n")
    response = launcher_client.post("/runs/new/", {**form_data(), "plan_file": broken})
    (error,) = response.context["preflight"].errors
    assert error.where == "YAML syntax" and "line 2" in error.message
    assert nothing_saved()


def test_a_file_that_is_not_utf8_is_refused(launcher_client):
    response = launcher_client.post("/runs/new/", {**form_data(), "plan_file": upload(b"goal: caf\xe9\n")})
    (error,) = response.context["preflight"].errors
    assert error.where == "encoding" and "is not UTF-8" in error.message
    assert nothing_saved()


def test_an_upload_over_the_size_limit_is_refused_before_it_is_read(launcher_client):
    big = upload(b"#" * (plans.MAX_PLAN_BYTES + 1), "huge.yaml")
    response = launcher_client.post("/runs/new/", {**form_data(), "plan_file": big})
    assert response.status_code == 200
    (message,) = response.context["form"].errors["plan_file"]
    assert message == (
        f"huge.yaml: the file is {plans.MAX_PLAN_BYTES + 1:,} bytes; a plan file may be at most "
        f"{plans.MAX_PLAN_BYTES:,} bytes (5 MB)"
    )
    assert message.replace(" ", "") in response.text.replace(" ", "")
    assert nothing_saved()


# --- Preflight and Launch --------------------------------------------------------------------------


def test_preflight_shows_dag_cost_and_duration_and_saves_nothing(launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload())
    assert nothing_saved()
    response = launcher_client.get(preflight_url)
    assert response.status_code == 200
    checked = response.context["preflight"]
    assert checked.ok and checked.can_launch
    layers = [[node.key for node in layer] for layer in checked.layers]
    assert layers == [["spec"], ["design"], ["implement", "test_plan"], ["review"]]
    assert checked.critical_path == ["spec", "design", "implement", "review"]
    assert checked.estimate_usd == Decimal("0.1332")
    # Every demo agent here takes 0.2 s: the chain of 4 beats 5 tasks over a cap of 4.
    assert checked.predicted_duration_s == pytest.approx(0.8)
    html = response.text
    assert FEATURE_ESTIMATE in html and "≈ 0.8 s" in html and "critical path" in html
    assert 'id="preflight-node-test_plan"' in html and "review after" in html
    assert "No worker cluster is running" in html  # no qcluster in this test
    assert "Launch run" in html
    assert nothing_saved()


def test_preflight_counts_the_tool_calls_that_wait_for_approval(launcher_client):
    """examples/workspace_report.yaml has no gate, but its agents' grants ask for approval: the
    preflight said "CHECKPOINTS 0 — The run needs no human decision." and every run stopped."""
    grant_with_approval("researcher", "workspace", "write_file")
    grant_with_approval("writer", "workspace", "read_file")
    report = ROOT / "examples" / "workspace_report.yaml"
    html = launcher_client.get(check(launcher_client, plan_file=upload(report.read_bytes(), report.name))).text
    assert "needs no human decision" not in html
    assert '<div class="stat-value">0 + tool calls</div>' in html
    assert (
        "its agents may ask a person to approve calls of workspace:write_file (researcher), "
        "workspace:read_file (writer): the task waits for each decision." in html
    )


def test_preflight_says_an_agent_with_tools_has_no_worst_case(launcher_client):
    """The page called one model call per task the "worst case (maximum output)" of agents that
    make up to max_steps calls, each re-sending every tool result so far."""
    from orchestrator.models import Agent, Tool, ToolGrant, ToolServer

    server = ToolServer.objects.create(name="workspace", transport="stdio", command="x")
    Tool.objects.create(server=server, name="calculate", input_schema={"type": "object"})
    ToolGrant.objects.create(agent=Agent.objects.get(name="researcher"), server=server)
    report = ROOT / "examples" / "workspace_report.yaml"
    html = launcher_client.get(check(launcher_client, plan_file=upload(report.read_bytes(), report.name))).text
    researcher = re.search(r'<td class="small muted" data-basis="([\w-]+)">([^<]*)</td>', html)
    assert researcher and researcher.group(1) == "first-call"
    assert (
        "it uses tools, so no worst case can be given: up to 8 model calls per task (its max_steps)"
        in researcher.group(2)
    )
    assert "worst case (maximum output) for writer" in html  # the writer has no tools: its worst case stands
    assert "for researcher, which has no history yet and uses tools, no worst case can be given" in html


def preflight_words(client, **overrides) -> str:
    """The text of the preflight page of the New-run form posted with `overrides`, as read."""
    page = client.get(check(client, **overrides)).text
    return " ".join(html_module.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_preflight_says_what_sets_the_duration_and_how_many_run_at_once_under_the_cap(launcher_client):
    brief = ROOT / "examples" / "research_brief.yaml"
    words = preflight_words(launcher_client, plan_file=upload(brief.read_bytes(), brief.name), cap="2")
    # scope, then the four angles in two rounds of two, then the brief: 0.2 s each
    assert "≈ 0.8 s set by the run's cap of 2: critical path 0.6 s, total work 1.2 s" in words
    assert words.count("cap of 2") == 1  # it said "…, total work 1.2 s over a cap of 2" too
    assert "3 steps, up to 2 in parallel (the widest step has 4)" in words
    assert "up to 4 in parallel" not in words


def test_preflight_names_the_runs_cap_once_whatever_sets_the_duration(launcher_client):
    """When the critical path or an agent's limit sets the duration, the note says what it
    assumes of the cap and what sets it, naming the cap once."""
    brief = ROOT / "examples" / "research_brief.yaml"
    words = preflight_words(launcher_client, plan_file=upload(brief.read_bytes(), brief.name), cap="4")
    assert "≈ 0.6 s at the run's cap of 4, set by the critical path (0.6 s); total work 1.2 s" in words
    assert words.count("cap of 4") == 1 and words.count("critical path: critical path") == 0
    Agent.objects.filter(name="writer").update(max_concurrency=1)
    drafts = "goal: g\nsubtasks:\n" + "".join(f"  - {{key: d{n}, agent: writer, title: D{n}}}\n" for n in range(3))
    words = preflight_words(launcher_client, plan_file=upload(drafts), cap="4")
    assert (
        "≈ 0.6 s at the run's cap of 4, set by the writer's limit of 1 at once: critical path 0.2 s, total work 0.6 s"
        in words
    )
    assert words.count("cap of 4") == 1


def test_preflight_says_the_input_tokens_it_counted_for_a_fan_in(launcher_client):
    """The team's row of the reviewer said "median of its last 3 answers: 394 tokens in, 255 out"
    beside a cost of twelve thousand tokens in: what its upstreams send the review is counted
    whenever it passes the median, and the row says so."""
    reviewer = Agent.objects.get(name="reviewer")
    history = Plan.objects.create(goal="history")
    run = Run.objects.create(plan=history)
    for index in range(3):
        subtask = Subtask.objects.create(plan=history, key=f"h{index}", title="h", agent=reviewer, position=index)
        task = TaskRun.objects.create(run=run, subtask=subtask, agent=reviewer, state=TaskRun.State.SUCCEEDED)
        Attempt.objects.create(
            task_run=task, number=1, state=Attempt.State.SUCCEEDED, input_tokens=394, output_tokens=255
        )
    html = launcher_client.get(check(launcher_client, plan_file=pipeline_upload())).text
    row = re.search(r"<tr><td>reviewer</td>(.*?)</tr>", html, re.S)
    assert row, "no row of the reviewer in the team"
    words = " ".join(html_module.unescape(re.sub(r"<[^>]+>", " ", row.group(1))).split())
    # review: 4,000 planned + 8,040 of its upstreams' full outputs, at $3, and 255 out at $15 per million
    assert words == (
        "simulated · sim-1 simulated 1 4 $0.0399 median of its last 3 answers: 255 tokens out; 12,040 tokens in, "
        "as the plan estimates its input (its prompt and what its upstreams send) above the median of 394"
    )


def test_launch_saves_the_plan_and_starts_the_run_then_goes_to_the_run_page(launcher_client, personas):
    preflight_url = check(launcher_client, plan_file=pipeline_upload(), cap="3")
    settings = form_data(cap="2", budget_usd="0.25", failure_policy="fail_fast", action="launch")
    response = launcher_client.post(preflight_url, settings)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    launcher = personas["launcher"]
    assert (run.cap, run.budget_usd, run.failure_policy, run.launched_by) == (2, Decimal("0.25"), "fail_fast", launcher)
    assert run.status == Run.Status.RUNNING
    plan = run.plan
    assert (plan.source, plan.source_name, plan.created_by) == (Plan.Source.FILE, FEATURE_PIPELINE.name, launcher)
    assert plan.document == FEATURE_PIPELINE.read_text()
    assert plan.subtasks.count() == 5 and run.tasks.count() == 5
    assert Event.objects.filter(run=run, type="run.created", actor_user=personas["launcher"]).exists()
    # A second submit of the same preflight goes to the same run instead of launching again.
    again = launcher_client.post(preflight_url, form_data(action="launch"))
    assert again.status_code == 302 and again["Location"] == f"/runs/{run.pk}/"
    assert Run.objects.count() == 1 and Plan.objects.count() == 1


def test_the_goal_field_replaces_the_files_goal(launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload(), goal="Tokens, but shorter")
    assert launcher_client.get(preflight_url).context["preflight"].goal == "Tokens, but shorter"
    launcher_client.post(preflight_url, form_data(action="launch"))
    assert Run.objects.get().plan.goal == "Tokens, but shorter"


def test_require_plan_approval_starts_the_run_awaiting_approval(launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload(), require_plan_approval="on")
    assert launcher_client.get(preflight_url).context["decisions"].checkpoints == 2  # the design review + the plan
    launcher_client.post(preflight_url, form_data(require_plan_approval="on", action="launch"))
    run = Run.objects.get()
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert run.checkpoints.get().kind == "plan"


def test_over_budget_is_refused_with_both_numbers_and_nothing_is_saved(launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload(), budget_usd="0.05")
    page = launcher_client.get(preflight_url)
    refusal = (
        "The estimated cost $0.1332 is over the budget of $0.05: raise the budget to at least $0.1332 or trim the plan."
    )
    assert page.context["preflight"].over_budget and refusal in page.text
    response = launcher_client.post(preflight_url, form_data(budget_usd="0.05", action="launch"))
    assert response.status_code == 200
    assert refusal in response.text
    assert nothing_saved()
    # Raising the budget on the same preflight, then Launch: it goes.
    assert launcher_client.post(preflight_url, form_data(budget_usd="0.20", action="check")).status_code == 302
    assert not launcher_client.get(preflight_url).context["preflight"].over_budget
    assert launcher_client.post(preflight_url, form_data(budget_usd="0.20", action="launch")).status_code == 302
    assert Run.objects.get().budget_usd == Decimal("0.20")


def test_an_agent_retired_after_the_preflight_stops_the_launch_and_nothing_is_saved(launcher_client):
    preflight_url = check(launcher_client, plan_file=pipeline_upload())
    Agent.objects.filter(name="coder").update(status=Agent.Status.RETIRED)
    response = launcher_client.post(preflight_url, form_data(action="launch"))
    assert response.status_code == 200
    assert 'agent "coder" is retired' in response.text.replace("&quot;", '"')
    assert nothing_saved()


def test_a_refusal_by_the_engine_is_shown_and_nothing_is_saved(launcher_client, monkeypatch):
    preflight_url = check(launcher_client, plan_file=pipeline_upload())

    def refuse(*args, **kwargs):
        raise runs.LaunchRefused("cap must be at least 1, got 0")

    monkeypatch.setattr(runs, "launch", refuse)
    response = launcher_client.post(preflight_url, form_data(action="launch"))
    assert response.status_code == 200
    assert "Launch refused: cap must be at least 1, got 0" in response.text
    assert nothing_saved()


def test_an_unknown_or_expired_preflight_goes_back_to_the_form(launcher_client):
    response = launcher_client.get("/runs/new/nosuchtoken/", follow=True)
    assert response.redirect_chain == [("/runs/new/", 302)]
    assert "That check has expired" in response.text


def test_a_saved_plan_is_launched_as_it_is(launcher_client, make_plan, personas):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}, goal="Saved goal")
    assert plan.goal in launcher_client.get("/runs/new/").text
    preflight_url = check(launcher_client, source="saved", saved_plan=str(plan.pk))
    checked = launcher_client.get(preflight_url).context["preflight"]
    assert checked.ok and checked.estimate_usd == runs.estimate_cost(plan)
    response = launcher_client.post(preflight_url, form_data(action="launch"))
    run = Run.objects.get()
    assert run.plan == plan and Plan.objects.count() == 1
    assert response["Location"] == f"/runs/{run.pk}/"


def test_a_saved_plan_keeps_its_goal(launcher_client, make_plan):
    plan = make_plan({"a": ("researcher", [])}, goal="Saved goal")
    data = form_data(source="saved", saved_plan=str(plan.pk), goal="Another goal")
    response = launcher_client.post("/runs/new/", data)
    assert response.status_code == 200
    assert "A saved plan keeps its own goal" in response.context["form"].errors["goal"][0]
    assert not Run.objects.exists()


def test_a_saved_plan_with_a_retired_agent_lists_it(launcher_client, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])})
    Agent.objects.filter(name="writer").update(status=Agent.Status.RETIRED)
    response = launcher_client.post("/runs/new/", form_data(source="saved", saved_plan=str(plan.pk)))
    assert response.status_code == 200
    (error,) = response.context["preflight"].errors
    assert str(error) == 'subtask "b": agent: agent "writer" is retired; only active agents can run subtasks'
    assert not Run.objects.exists()


def test_the_planner_proposes_a_plan_that_is_launched_after_its_preflight(launcher_client, personas, settings):
    settings.ANTHROPIC_API_KEY = ""  # the simulated planner
    preflight_url = check(launcher_client, source="planner", goal="Research the best vector database for us")
    plan = Plan.objects.get()  # the planner saves the plan it proposes; no run yet
    assert plan.source == Plan.Source.PLANNER and not Run.objects.exists()
    page = launcher_client.get(preflight_url)
    assert page.context["preflight"].ok
    assert f"Proposed by the planner and saved as plan <strong>#{plan.pk}</strong>, not launched yet." in page.text
    assert "simulated planner" in page.text
    launcher_client.post(preflight_url, form_data(action="launch"))
    assert Run.objects.get().plan == plan


def test_a_planner_error_is_shown_on_the_form(launcher_client, monkeypatch):
    from orchestrator.plans import planner

    def fail(goal, *, created_by=None, on_feedback=None):
        raise planner.PlannerError("the planner's answer named no agents")

    monkeypatch.setattr(planner, "propose_plan", fail)
    response = launcher_client.post("/runs/new/", form_data(source="planner", goal="Anything at all"))
    assert response.status_code == 200
    assert "the planner&#x27;s answer named no agents" in response.text
    assert nothing_saved()


# --- A plan written or pasted on the page -----------------------------------------------------------


def test_a_pasted_plan_is_checked_as_you_type_naming_each_problem_with_its_line(launcher_client):
    bad = "goal: Ship it\nsubtasks:\n  - key: a\n    agent: nobody\n    title: A\n    depends_on: [zz]\n"
    response = launcher_client.post("/runs/new/check/", {"plan_text": bad})
    assert response.status_code == 200 and "<html" not in response.text
    assert "2 problems" in response.text
    assert "no agent named &quot;nobody&quot;" in response.text and "line 4" in response.text
    assert "zz" in response.text
    good = FEATURE_PIPELINE.read_text()
    response = launcher_client.post("/runs/new/check/", {"plan_text": good})
    assert "Valid:" in response.text and "5 subtasks" in response.text
    assert "Write or paste a plan" in launcher_client.post("/runs/new/check/", {"plan_text": "  "}).text
    assert nothing_saved()


def test_a_pasted_plan_goes_through_the_preflight_and_is_saved_only_at_launch(launcher_client):
    form = launcher_client.get("/runs/new/").text
    assert 'name="plan_text"' in form and 'hx-post="/runs/new/check/"' in form and 'value="text"' in form
    preflight_url = check(launcher_client, source="text", plan_text=FEATURE_PIPELINE.read_text())
    assert nothing_saved()
    page = launcher_client.get(preflight_url).text
    assert "The plan written on the New-run page, not saved yet." in page and FEATURE_ESTIMATE in page
    launcher_client.post(preflight_url, form_data(action="launch"))
    run = Run.objects.get()
    assert run.plan.document == FEATURE_PIPELINE.read_text()
    # Its plan's page and the plans list say it was written, not a file ("File · written on the New-run page").
    assert (run.plan.source, run.plan.source_name) == (Plan.Source.MANUAL, "written on the New-run page")
    plan_page = launcher_client.get(f"/plans/{run.plan.pk}/").text
    assert "Manual · written on the New-run page" in plan_page and "File ·" not in plan_page


def test_an_empty_editor_is_refused_by_name(launcher_client):
    response = launcher_client.post("/runs/new/", form_data(source="text", plan_text=""))
    assert response.status_code == 200 and "Write or paste a plan." in response.text
    assert nothing_saved()


def test_the_same_document_twice_is_one_plan_with_two_runs(launcher_client):
    for _ in range(2):
        preflight_url = check(launcher_client, plan_file=pipeline_upload())
        launcher_client.post(preflight_url, form_data(action="launch"))
    assert Plan.objects.count() == 1 and Run.objects.count() == 2
    check_text = launcher_client.post("/runs/new/check/", {"plan_text": FEATURE_PIPELINE.read_text()}).text
    plan = Plan.objects.get()
    assert f'The same as saved <a href="/plans/{plan.pk}/">plan #{plan.pk}</a>' in check_text
    # a different goal makes a different plan
    preflight_url = check(launcher_client, plan_file=pipeline_upload(), goal="Another goal")
    launcher_client.post(preflight_url, form_data(action="launch"))
    assert Plan.objects.count() == 2


def test_edit_a_copy_opens_a_saved_plan_in_the_editor(launcher_client, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"], {"gate": "after"})}, goal="Edit me")
    page = launcher_client.get(f"/runs/new/?edit={plan.pk}")
    assert page.context["form"].initial["source"] == "text"
    text = page.context["form"].initial["plan_text"]
    assert "goal: Edit me" in text and "depends_on:\n  - a" in text and "gate: after" in text
    assert plans.validate_document(text).keys == ["a", "b"]  # the editor gets a valid document
    chosen = launcher_client.get(f"/runs/new/?plan={plan.pk}").context["form"].initial
    assert (chosen["source"], chosen["saved_plan"]) == ("saved", plan.pk)
