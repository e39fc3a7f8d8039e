"""Preflight: what a person should know before launching a plan, computed without saving it.

The New-run page shows a Preflight between "Check" and "Launch" (DESIGN J1):

- every validation problem, in words and with its line (`plans.validate_document`, exactly what
  `manage.py validate_plan` reports);
- the DAG as layers (topological generations), each subtask with its agent, gate, dependencies,
  estimated duration and whether it is on the critical path;
- the cost estimate (`cost_estimates`: each agent's median recorded usage once it has history,
  else the worst case of its max output tokens — but for an agent with tools, which has none to
  give (up to `max_steps` model calls re-sending every tool result, any number of tools a step):
  its first call is counted and the words say so; a subtask's input counts what it receives from its upstreams,
  `context.estimated_input_tokens`; the basis is shown) against the budget — the
  same estimate `runs.launch` checks the budget with;
- the predicted duration: the plan scheduled under the run's cap and each agent's own limit with
  `plans.estimated_duration_s` weights (`plans.makespan`), never under the critical path, the
  total work over the cap or an agent's work over its limit; what sets it (the critical path,
  the cap, an agent's limit) and how many subtasks it runs at once. Time spent waiting for people
  at checkpoints comes on top;
- what may stop the run for a person (`HumanDecisions`): the plan's review when asked for, its
  gates and reviews, and the tools its agents may call only with a person's approval
  (`grant_wording.approval_grants`), named since how many calls they make is the model's choice.

Nothing is written until `launching.launch_document` (or `runs.launch` for a saved plan), which
saves the plan and starts the run in one transaction: a refused launch leaves no plan behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from orchestrator import plans, wording
from orchestrator.engine import context, cost_estimates, preflight_groups, run_settings
from orchestrator.engine.cluster import cluster_is_running
from orchestrator.governance import grant_wording
from orchestrator.models import Plan, Subtask
from orchestrator.plans import PlanError, PlanSpec, PlanValidationError, dag, makespan
from orchestrator.readmodels import prices


@dataclass(frozen=True)
class NodePreview:
    """One subtask as the preflight DAG shows it."""

    key: str
    title: str
    agent: str
    gate: str
    depends_on: tuple[str, ...]
    duration_s: float
    on_critical_path: bool

    is_group = False  # a card of its own, not a folded group (preflight_groups.NodeGroup)


@dataclass(frozen=True)
class AgentLine:
    """One agent of the team: how many subtasks it takes, what they may cost, and on what basis."""

    name: str
    provider: str
    model: str
    max_concurrency: int
    subtasks: int
    estimate_usd: Decimal
    priced: bool
    basis: str  # cost_estimates.AgentEstimate.basis_text
    learned: bool  # True when the estimate comes from the agent's recorded usage
    # What the estimate is: "learned" (median usage), "worst-case" (one call at maximum output), or
    # "first-call" (an agent with tools before history: its first call, no worst case to give).
    basis_kind: str = "worst-case"

    @classmethod
    def of(cls, line: cost_estimates.AgentEstimate) -> AgentLine:
        agent = line.agent
        return cls(
            name=agent.name,
            provider=agent.provider,
            model=agent.model,
            max_concurrency=agent.max_concurrency,
            subtasks=line.subtasks,
            estimate_usd=line.estimate_usd,
            priced=line.priced,
            basis=line.basis_text,
            learned=line.basis.learned,
            basis_kind="learned"
            if line.basis.learned
            else ("first-call" if line.basis.tools is not None else "worst-case"),
        )


@dataclass(frozen=True)
class HumanDecisions:
    """What in a run may wait for a person, known before launch: `checkpoints` (the plan's review
    when asked for, its gates and reviews) and the tools granted with approval per call."""

    checkpoints: int
    approval_grants: tuple[grant_wording.ApprovalGrant, ...] = ()
    plan_review: bool = False  # one of the checkpoints is the plan's approval

    @property
    def which(self) -> str:
        """The checkpoints named: "the plan's approval and 1 gate or review". The card said "2" of a
        plan that showed one review, and "People decide each one" of a plan that showed none."""
        gates = self.checkpoints - int(self.plan_review)
        named = [f"{gates} gate{'s' if gates > 1 else ''} or review{'s' if gates > 1 else ''}"] if gates else []
        return " and ".join((["the plan's approval"] if self.plan_review else []) + named)

    @property
    def value(self) -> str:
        """The Checkpoints figure: "2", or "2 + tool calls" when calls may need approval too."""
        return f"{self.checkpoints} + tool calls" if self.approval_grants else str(self.checkpoints)

    @property
    def tools_text(self) -> str:
        """ "workspace:write_file (researcher), workspace:read_file (writer)"."""
        return ", ".join(grant.text for grant in self.approval_grants)

    @property
    def note(self) -> str:
        """What the figure means for the person about to launch."""
        if not self.approval_grants:
            if not self.checkpoints:
                return "The run needs no human decision."
            decide = (
                "a person decides it; time spent waiting for it comes on top"
                if self.checkpoints == 1
                else "people decide each one; time spent waiting for them comes on top"
            )
            return f"{self.which[0].upper()}{self.which[1:]}: {decide}."
        tools = f"its agents may ask a person to approve calls of {self.tools_text}"
        if not self.checkpoints:
            return f"The plan has no gate or review, but {tools}: the task waits for each decision."
        counted = wording.counted(self.checkpoints, "checkpoint")
        return f"People decide {counted} ({self.which}), and {tools}; time spent waiting for them comes on top."


@dataclass
class Preflight:
    """The outcome of a preflight check. `errors` empty means the plan itself is valid."""

    cap: int
    budget_usd: Decimal
    goal: str = ""
    errors: list[PlanError] = field(default_factory=list)
    layers: list[list[NodePreview]] = field(default_factory=list)
    subtasks: int = 0
    edges: int = 0
    agents: list[AgentLine] = field(default_factory=list)
    estimate_usd: Decimal = Decimal("0")
    estimate_basis: str = ""  # what the estimate rests on (cost_estimates.PlanEstimate.basis_text)
    critical_path: list[str] = field(default_factory=list)
    critical_path_s: float = 0.0
    total_work_s: float = 0.0
    forecast: makespan.Forecast = makespan.Forecast(seconds=0.0, peak_parallel=0)
    duration_binding: makespan.Binding = makespan.CRITICAL_PATH
    checkpoints: int = 0  # gates and reviews in the plan: people decide each one
    # The grants of the plan's agents under which each call waits for a person.
    approval_grants: list[grant_wording.ApprovalGrant] = field(default_factory=list)
    workers_running: bool = True

    def decisions(self, *, plan_review: bool) -> HumanDecisions:
        """What may wait for a person in the run launched with (`plan_review`) or without a
        review of its plan."""
        return HumanDecisions(self.checkpoints + int(plan_review), tuple(self.approval_grants), plan_review)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def unpriced_models(self) -> list[str]:
        """Provider:model pairs with no ProviderLimit price: counted as $0 in the estimate."""
        return sorted({f"{line.provider}:{line.model}" for line in self.agents if not line.priced})

    @property
    def unpriced_note(self) -> str:
        """What the estimate leaves out ("" when every model has a price), on New run's pre-flight
        and the plan page alike: "No price is known for simulated:x: counted as $0 (set prices in
        the admin under provider limits)."."""
        return prices.estimate_note(self.unpriced_models)

    @property
    def over_budget(self) -> bool:
        return self.ok and self.estimate_usd > self.budget_usd

    @property
    def budget_refusal(self) -> str:
        """Why a launch would be refused for money, with both numbers ("" when it fits)."""
        if not self.over_budget:
            return ""
        return f"{run_settings.budget_shortfall(self.estimate_usd, self.budget_usd, what='The estimated cost')} or trim the plan."

    @property
    def can_launch(self) -> bool:
        return self.ok and not self.over_budget

    @property
    def predicted_duration_s(self) -> float:
        return self.forecast.seconds

    @property
    def duration_bound(self) -> str:
        """What sets the predicted duration: "the critical path", "the run's cap of 2", "the
        researcher's limit of 4 at once"."""
        return self.duration_binding.text

    def duration_note(self, cap_name: str) -> str:
        """What the predicted duration assumes and what sets it, naming the cap and each number
        once: "set by the default cap of 2: critical path 0.6 s, total work 1.2 s" when the cap
        binds, "at the default cap of 4, set by the critical path (0.6 s); total work 1.2 s", "at
        the default cap of 4, set by the writer's limit of 1 at once: critical path 0.2 s, total
        work 0.6 s". `cap_name` says whose cap it is ("the default cap")."""
        cap = f"{cap_name} of {self.cap}"
        path, work = wording.duration(self.critical_path_s), wording.duration(self.total_work_s)
        if self.duration_binding.kind == "cap":
            return f"set by {cap}: critical path {path}, total work {work}"
        if self.duration_binding == makespan.CRITICAL_PATH:
            return f"at {cap}, set by the critical path ({path}); total work {work}"
        return f"at {cap}, set by {self.duration_bound}: critical path {path}, total work {work}"

    @property
    def layers_with_cards(self) -> list[tuple[list[NodePreview], list[NodePreview | preflight_groups.NodeGroup]]]:
        """Each step with its cards as the page draws them: a wide step's like subtasks folded
        into one card (`preflight_groups.fold`)."""
        return [(layer, preflight_groups.fold(layer)) for layer in self.layers]

    @property
    def widest_layer(self) -> int:
        return max((len(layer) for layer in self.layers), default=0)

    @property
    def steps_note(self) -> str:
        """The plan's steps and how many of its subtasks run at once under the cap and the agents'
        limits: "3 steps, up to 2 in parallel (the widest step has 4)"."""
        steps = wording.counted(len(self.layers), "step")
        parallel = self.forecast.peak_parallel
        if parallel < self.widest_layer:
            return f"{steps}, up to {parallel} in parallel (the widest step has {self.widest_layer})"
        return f"{steps}, up to {parallel} in parallel"


# --- Uploads -------------------------------------------------------------------------------------


def upload_too_large(filename: str, size: int) -> PlanError | None:
    """A PlanError when an upload of `size` bytes is over plans.MAX_PLAN_BYTES (checked before
    reading it), else None."""
    if size <= plans.MAX_PLAN_BYTES:
        return None
    return PlanError(
        filename or "upload",
        f"the file is {size:,} bytes; a plan file may be at most {plans.MAX_PLAN_BYTES:,} bytes "
        f"({plans.MAX_PLAN_BYTES // (1024 * 1024)} MB)",
    )


# --- Checks --------------------------------------------------------------------------------------


def check_document(
    document: str | bytes, *, filename: str = "", goal: str = "", cap: int, budget_usd: Decimal
) -> Preflight:
    """Preflight of an unsaved plan document (an upload or planner output)."""
    try:
        spec = plans.validate_document(document, filename=filename, goal=goal)
    except PlanValidationError as error:
        return Preflight(cap=cap, budget_usd=Decimal(budget_usd), goal=goal.strip(), errors=error.errors)
    return check_spec(spec, cap=cap, budget_usd=budget_usd)


def check_spec(spec: PlanSpec, *, cap: int, budget_usd: Decimal) -> Preflight:
    """Preflight of a validated, unsaved PlanSpec."""
    upstreams = Counter(down for _, down in spec.edges)
    has_downstream = {up for up, _ in spec.edges}
    inputs = {
        s.key: context.estimated_input_tokens(
            s.estimated_input_tokens,
            inputs=s.inputs,
            upstreams=upstreams[s.key],
            has_downstream=s.key in has_downstream,
        )
        for s in spec.subtasks
    }
    estimated = cost_estimates.estimate(((s.agent, inputs[s.key]) for s in spec.subtasks), spec.agents)
    gates = sum(1 for s in spec.subtasks if s.gate != Subtask.Gate.NONE)
    titles = {s.key: (s.title, s.agent, s.gate) for s in spec.subtasks}
    return _build(
        goal=spec.goal,
        keys=spec.keys,
        edges=spec.edges,
        weights=spec.weights(),
        titles=titles,
        estimated=estimated,
        checkpoints=gates,
        cap=cap,
        budget_usd=budget_usd,
    )


def check_saved_plan(plan: Plan, *, cap: int, budget_usd: Decimal) -> Preflight:
    """Preflight of a saved plan: its agents must still be active (and their settings valid)."""
    subtasks = list(plan.subtasks.select_related("agent").order_by("position"))
    errors = [
        PlanError(
            f'subtask "{subtask.key}"',
            f'agent "{subtask.agent.name}" is {subtask.agent.status}; only active agents can run subtasks',
            "agent",
        )
        for subtask in subtasks
        if not subtask.agent.is_schedulable
    ]
    agents = {subtask.agent.name: subtask.agent for subtask in subtasks}
    errors += [
        PlanError(f'agent "{name}"', problem, "provider_options")
        for name, agent in sorted(agents.items())
        for problem in plans.agent_setting_problems(agent)
    ]
    if errors:
        return Preflight(cap=cap, budget_usd=Decimal(budget_usd), goal=plan.goal, errors=errors)
    keys, edges = plans.plan_graph(plan)
    return _build(
        goal=plan.goal,
        keys=keys,
        edges=edges,
        weights=plans.plan_weights(plan),
        titles={s.key: (s.title, s.agent.name, s.gate) for s in subtasks},
        estimated=cost_estimates.plan_estimate(plan),
        checkpoints=sum(1 for s in subtasks if s.gate != Subtask.Gate.NONE),
        cap=cap,
        budget_usd=budget_usd,
    )


def _build(
    *,
    goal: str,
    keys: list[str],
    edges: list[dag.Edge],
    weights: Mapping[str, float],
    titles: Mapping[str, tuple[str, str, str]],
    estimated: cost_estimates.PlanEstimate,
    checkpoints: int,
    cap: int,
    budget_usd: Decimal,
) -> Preflight:
    path, path_s = dag.critical_path(keys, edges, weights)
    on_path = set(path)
    work = makespan.Work(dag.SinksFirst.of(keys, edges), {key: titles[key][1] for key in keys}, weights)
    limits = makespan.Limits(cap, {line.agent.name: line.agent.max_concurrency for line in estimated.agents})
    forecast = makespan.forecast(work, limits)
    upstream: dict[str, list[str]] = {key: [] for key in keys}
    for up, down in edges:
        upstream[down].append(up)
    layers = [
        [
            NodePreview(
                key=key,
                title=titles[key][0],
                agent=titles[key][1],
                gate=titles[key][2],
                depends_on=tuple(upstream[key]),
                duration_s=float(weights.get(key, 0.0)),
                on_critical_path=key in on_path,
            )
            for key in layer
        ]
        for layer in dag.layers(keys, edges)
    ]
    return Preflight(
        cap=cap,
        budget_usd=Decimal(budget_usd),
        goal=goal,
        layers=layers,
        subtasks=len(keys),
        edges=len(set(edges)),
        agents=[AgentLine.of(line) for line in estimated.agents],
        estimate_usd=estimated.total_usd,
        estimate_basis=estimated.basis_text,
        critical_path=path,
        critical_path_s=path_s,
        total_work_s=float(sum(weights.get(key, 0.0) for key in keys)),
        forecast=forecast,
        duration_binding=makespan.binding(work, limits, forecast.seconds),
        checkpoints=checkpoints,
        approval_grants=grant_wording.approval_grants(line.agent for line in estimated.agents),
        workers_running=cluster_is_running(),
    )
