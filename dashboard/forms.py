"""Forms of the dashboard: the New-run form, its run settings, and a checkpoint decision."""

from __future__ import annotations

import importlib.util

from django import forms
from django.urls import reverse

from orchestrator import plans
from orchestrator.engine import preflight, run_settings
from orchestrator.engine.run_settings import RunSettings
from orchestrator.models import Plan, Run

SOURCE_FILE = "file"
SOURCE_TEXT = "text"
SOURCE_SAVED = "saved"
SOURCE_PLANNER = "planner"
# Sources whose plan is a document checked by the preflight and saved only with its run.
DOCUMENT_SOURCES = (SOURCE_FILE, SOURCE_TEXT)


def planner_available() -> bool:
    """True when the planner module (orchestrator/plans/planner.py) is installed in this build."""
    return importlib.util.find_spec("orchestrator.plans.planner") is not None


def source_choices() -> list[tuple[str, str]]:
    choices = [
        (SOURCE_FILE, "Upload a plan file (YAML or JSON)"),
        (SOURCE_TEXT, "Write or paste a plan (YAML or JSON), checked as you type"),
        (SOURCE_SAVED, "A saved plan"),
    ]
    if planner_available():
        choices.append((SOURCE_PLANNER, "Ask the planner to propose a plan for the goal"))
    return choices


class RunSettingsForm(forms.Form):
    """How a plan runs: concurrency cap, budget, failure policy, plan approval (`RunSettings`).

    The limits and their messages are the run settings' own, as on the command line and in the API.
    """

    cap = forms.IntegerField(
        label="Concurrency cap",
        widget=forms.NumberInput(attrs={"min": run_settings.MIN_CAP, "max": run_settings.MAX_CAP}),
        help_text="Tasks of this run at once (each agent's own limit applies too).",
    )
    budget_usd = forms.DecimalField(
        label="Budget (USD)",
        widget=forms.NumberInput(attrs={"min": run_settings.MIN_BUDGET_USD, "step": run_settings.MIN_BUDGET_USD}),
        help_text="The run is refused if its estimated cost is above this, and stops admitting work at it.",
    )
    failure_policy = forms.ChoiceField(
        label="When a task fails",
        choices=[
            (Run.FailurePolicy.CONTINUE, "Continue: skip what depends on it, run independent branches"),
            (Run.FailurePolicy.FAIL_FAST, "Fail fast: stop the run at the first failure"),
        ],
        widget=forms.RadioSelect,
    )
    require_plan_approval = forms.BooleanField(
        label="Require plan approval before anything runs",
        required=False,
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("initial", RunSettings.defaults().as_dict())
        super().__init__(*args, **kwargs)

    def clean_cap(self):
        return _run_setting(run_settings.parse_cap, self.cleaned_data["cap"])

    def clean_budget_usd(self):
        return _run_setting(run_settings.parse_budget, self.cleaned_data["budget_usd"])

    def run_settings(self) -> RunSettings:
        """The cleaned settings."""
        data = self.cleaned_data
        return RunSettings(
            cap=data["cap"],
            budget_usd=data["budget_usd"],
            failure_policy=data["failure_policy"],
            require_plan_approval=bool(data["require_plan_approval"]),
        )


def _run_setting(parse, value):
    try:
        return parse(value)
    except run_settings.InvalidRunSetting as error:
        message = str(error)
        raise forms.ValidationError(f"{message[:1].upper()}{message[1:]}.") from None


class NewRunForm(RunSettingsForm):
    """Goal, plan source and run settings. The plan itself is checked by the preflight."""

    field_order = [
        "goal",
        "source",
        "plan_file",
        "plan_text",
        "saved_plan",
        "cap",
        "budget_usd",
        "failure_policy",
        "require_plan_approval",
    ]

    goal = forms.CharField(
        label="Goal",
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What should the team achieve?"}),
        help_text="Required for the planner. For a plan file it replaces the file's own goal; leave it "
        "empty to keep that. A saved plan keeps its goal.",
    )
    source = forms.ChoiceField(label="Plan source", widget=forms.RadioSelect)
    plan_file = forms.FileField(
        label="Plan file",
        required=False,
        allow_empty_file=False,
        widget=forms.FileInput(attrs={"accept": ".yaml,.yml,.json,application/json,application/yaml,text/yaml"}),
        help_text=f"YAML or JSON, at most {plans.MAX_PLAN_BYTES // (1024 * 1024)} MB.",
    )
    plan_text = forms.CharField(
        label="Plan",
        required=False,
        max_length=plans.MAX_PLAN_BYTES,
        strip=False,
        widget=forms.Textarea(
            attrs={
                "rows": 16,
                "spellcheck": "false",
                "class": "plan-editor",
                "placeholder": "goal: What the team should achieve\nsubtasks:\n  - key: scope\n    agent: researcher\n"
                "    title: Scope the question\n    instructions: ...\n  - key: write\n    agent: writer\n"
                "    title: Write it up\n    depends_on: [scope]",
            }
        ),
        help_text="The same format as a plan file. Problems are listed below as you type, each with its line.",
    )
    saved_plan = forms.ModelChoiceField(
        label="Saved plan",
        required=False,
        queryset=Plan.objects.order_by("-created_at"),
        empty_label="Choose a saved plan",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = source_choices()
        self.fields["source"].initial = SOURCE_FILE
        # The editor is checked as you type: htmx posts it (with the goal) to the check view.
        self.fields["plan_text"].widget.attrs.update(
            {
                "hx-post": reverse("new_run_check"),
                "hx-trigger": "input changed delay:400ms, load",
                "hx-target": "#plan-check",
                "hx-include": "[name='goal']",
                "hx-sync": "this:replace",
                "aria-describedby": "plan-check",
            }
        )
        self.fields["saved_plan"].label_from_instance = lambda plan: (
            f"#{plan.pk} · {plan.goal[:80]}{'…' if len(plan.goal) > 80 else ''} ({plan.get_source_display().lower()}"
            f"{', ' + plan.source_name if plan.source_name else ''})"
        )

    def clean_plan_file(self):
        upload = self.cleaned_data.get("plan_file")
        if upload and (problem := preflight.upload_too_large(upload.name, upload.size)):
            raise forms.ValidationError(str(problem))
        return upload

    def clean(self):
        data = super().clean()
        source = data.get("source")
        goal = (data.get("goal") or "").strip()
        if source == SOURCE_FILE and not data.get("plan_file") and "plan_file" not in self.errors:
            self.add_error("plan_file", "Choose a plan file to upload.")
        if source == SOURCE_TEXT and not (data.get("plan_text") or "").strip() and "plan_text" not in self.errors:
            self.add_error("plan_text", "Write or paste a plan.")
        if source == SOURCE_SAVED:
            plan = data.get("saved_plan")
            if plan is None and "saved_plan" not in self.errors:
                self.add_error("saved_plan", "Choose one of the saved plans.")
            elif plan is not None and goal and goal != plan.goal.strip():
                self.add_error(
                    "goal",
                    "A saved plan keeps its own goal: clear this field, or upload the plan as a file with the new "
                    "goal.",
                )
        if source == SOURCE_PLANNER and not goal:
            self.add_error("goal", "The planner needs a goal to plan for.")
        return data


class DecisionForm(forms.Form):
    comment = forms.CharField(
        label="Comment",
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Why? (required to reject)"}),
    )
