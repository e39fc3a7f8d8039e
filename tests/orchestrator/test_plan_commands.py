import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from orchestrator.models import Agent, Dependency, Plan, Subtask
from tests.conftest import child_database_url, child_env

pytestmark = pytest.mark.django_db

PROJECT_DIR = Path(__file__).resolve().parents[2]

GOOD_PLAN = """\
goal: Compare three vector databases
subtasks:
  - {key: research_a, agent: researcher, title: Research A, estimate: {output_tokens: 600}}
  - {key: research_b, agent: researcher, title: Research B}
  - {key: review, agent: researcher, title: Review, depends_on: [research_a, research_b], gate: before}
  - {key: report, agent: researcher, title: Report, depends_on: [review]}
"""

BAD_PLAN = """\
goal: Compare three vector databases
subtasks:
  - {key: a, agent: researcher, title: A, depends_on: [c]}
  - {key: b, agent: ghost, title: B, depends_on: [a]}
  - {key: c, agent: researcher, title: C, depends_on: [b], timeout_s: abc}
"""

BAD_PLAN_PROBLEMS = [
    'line 3: subtasks[0] (key "a"): depends_on: cycle: a → b → c → a',
    'line 4: subtasks[1] (key "b"): agent: no agent named "ghost"',
    'line 5: subtasks[2] (key "c"): timeout_s: must be an integer between 1 and 3600, got "abc"',
]

SYNTAX_ERROR_PLAN = "goal: g\nsubtasks:\n  - key: a\n    title: T: x\n"


@pytest.fixture
def researcher():
    return Agent.objects.create(name="researcher", provider_options={"latency": {"dist": "fixed", "seconds": 3}})


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run_command(name, *args):
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command(name, *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue()


def command_error(name, *args):
    with pytest.raises(CommandError) as caught:
        run_command(name, *args)
    assert caught.value.returncode == 1
    return str(caught.value)


def counts():
    return Plan.objects.count(), Subtask.objects.count(), Dependency.objects.count()


# --- validate_plan -------------------------------------------------------------------------------


def test_validate_plan_prints_summary(researcher, tmp_path):
    path = write(tmp_path, "plan.yaml", GOOD_PLAN)

    output = run_command("validate_plan", path)

    assert "plan.yaml: valid plan" in output
    assert "goal:          Compare three vector databases" in output
    assert "subtasks:      4" in output
    assert "edges:         3" in output
    assert "depth:         3 layers" in output
    assert "widest layer:  2 subtasks" in output
    assert "critical path: research_a → review → report (9.0 s estimated)" in output
    assert counts() == (0, 0, 0)


def test_validate_plan_lists_every_problem_under_a_heading(researcher, tmp_path):
    path = write(tmp_path, "bad.yaml", BAD_PLAN)

    message = command_error("validate_plan", path)

    assert message.splitlines() == [f"{path}: 3 problems", *(f"  {problem}" for problem in BAD_PLAN_PROBLEMS)]


def test_validate_plan_names_the_line_of_a_syntax_error(tmp_path):
    path = write(tmp_path, "broken.yaml", SYNTAX_ERROR_PLAN)

    assert command_error("validate_plan", path) == (
        f"{path}: 1 problem\n  YAML syntax: line 4, column 13: mapping values are not allowed here"
    )


def test_validate_plan_missing_file(tmp_path):
    path = str(tmp_path / "missing.yaml")

    assert command_error("validate_plan", path) == f"{path}: 1 problem\n  file: no such file: {path}"


def test_validate_plan_abbreviates_a_long_critical_path(researcher, tmp_path):
    keys = [f"step{i}" for i in range(30)]
    lines = ["goal: A long chain", "subtasks:", f"  - {{key: {keys[0]}, agent: researcher, title: T}}"]
    lines += [
        f"  - {{key: {key}, agent: researcher, title: T, depends_on: [{previous}]}}"
        for previous, key in zip(keys, keys[1:], strict=False)
    ]
    path = write(tmp_path, "chain.yaml", "\n".join(lines))

    output = run_command("validate_plan", path)

    assert (
        "critical path: step0 → step1 → step2 → step3 → step4 → step5 → … 18 more … → "
        "step24 → step25 → step26 → step27 → step28 → step29 (90.0 s estimated)"
    ) in output


# --- import_plan ---------------------------------------------------------------------------------


def test_import_plan_saves_the_plan(researcher, tmp_path):
    path = write(tmp_path, "plan.yaml", GOOD_PLAN)

    output = run_command("import_plan", path)

    plan = Plan.objects.get()
    assert output.strip() == f"Saved plan {plan.pk}: Compare three vector databases (4 subtasks, 3 dependencies)"
    assert (plan.source, plan.source_name, plan.document) == (Plan.Source.FILE, "plan.yaml", GOOD_PLAN)
    assert list(plan.subtasks.values_list("key", flat=True)) == ["research_a", "research_b", "review", "report"]
    assert counts() == (1, 4, 3)


def test_import_plan_accepts_json(researcher, tmp_path):
    path = write(
        tmp_path,
        "plan.json",
        '{"goal": "G", "subtasks": [{"key": "a", "agent": "researcher", "title": "A"}]}',
    )

    assert ": G (1 subtask, 0 dependencies)" in run_command("import_plan", path)
    assert counts() == (1, 1, 0)


def test_import_plan_on_a_bad_file_saves_nothing(researcher, tmp_path):
    path = write(tmp_path, "bad.yaml", BAD_PLAN)

    message = command_error("import_plan", path)

    assert message.splitlines() == [f"{path}: 3 problems", *(f"  {problem}" for problem in BAD_PLAN_PROBLEMS)]
    assert counts() == (0, 0, 0)


def test_import_plan_on_a_syntax_error_saves_nothing(tmp_path):
    path = write(tmp_path, "broken.yaml", SYNTAX_ERROR_PLAN)

    assert "line 4, column 13" in command_error("import_plan", path)
    assert counts() == (0, 0, 0)


def test_import_plan_refuses_an_oversized_file(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("goal: g\n" + "#" * (5 * 1024 * 1024), encoding="utf-8")

    message = command_error("import_plan", str(path))

    assert "size: the plan is 5,242,888 bytes; at most 5,242,880 bytes (5 MB) are allowed" in message
    assert counts() == (0, 0, 0)


# --- From the real command line ------------------------------------------------------------------


def manage(*args, database_url: str):
    """Run manage.py in a real subprocess against `database_url`."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=child_env(DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )


def empty_sqlite(tmp_path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def test_command_line_syntax_error_exits_1_without_traceback(tmp_path):
    path = write(tmp_path, "broken.yaml", SYNTAX_ERROR_PLAN)

    result = manage("validate_plan", path, database_url=empty_sqlite(tmp_path, "unused.sqlite3"))

    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{path}: 1 problem" in result.stderr
    assert "line 4, column 13: mapping values are not allowed here" in result.stderr


def test_command_line_validation_problems_exit_1_without_traceback(tmp_path):
    # The subprocess reads the (migrated) test database, where no agent exists.
    path = write(tmp_path, "bad.yaml", BAD_PLAN)

    result = manage("validate_plan", path, database_url=child_database_url())

    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{path}: 5 problems" in result.stderr
    assert 'no agent named "researcher"' in result.stderr
    assert "cycle: a → b → c → a" in result.stderr


def test_command_line_without_a_migrated_database_explains_itself(tmp_path):
    path = write(tmp_path, "plan.yaml", GOOD_PLAN)

    result = manage("import_plan", path, database_url=empty_sqlite(tmp_path, "empty.sqlite3"))

    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert "cannot read the agent registry" in result.stderr
    assert "migrate" in result.stderr


def test_the_same_document_imported_twice_is_one_plan(researcher, tmp_path):
    first = write(tmp_path, "plan.yaml", GOOD_PLAN)
    run_command("import_plan", first)
    plan = Plan.objects.get()
    again = write(tmp_path, "copy.yaml", GOOD_PLAN.replace("\n", "\r\n"))  # line endings aside, the same
    assert run_command("import_plan", again).strip() == (
        f"Already saved as plan {plan.pk} (the same document and goal): nothing new saved"
    )
    assert counts() == (1, 4, 3)
