"""The run page's DAG: nodes, edges and the groups a large graph is read by.

Three ways to group, each a *mode* the page switches between (`GROUP_MODES`):

- `fanout`: siblings with the same upstreams and agent (a fan-out), collapsed largest first
  until no layer is wider than MAX_LAYER_NODES;
- `agent`: the tasks of one agent within one step (layer) of the DAG, all collapsed;
- `step`: every task of a step, all collapsed (a pipeline view).

The page starts in `fanout` when that leaves every layer readable, else in `agent`
(`default_mode`). Also the run's structure as tasks: a task's upstream tasks, and the final
tasks (the plan's sinks), whose outputs are the run's result. The grouping functions take plain
data and are tested without a database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.models import Dependency, Run, TaskRun
from orchestrator.plans import dag

from .approved_plan import fixed_once_approved
from .tasks import tasks_query

# Siblings with the same upstream tasks and agent form a group from this many on ...
GROUP_MIN_SIZE = 3
# ... and the page first shows groups collapsed, largest first, until no layer of the DAG is
# wider than this many nodes (a person can expand them again).
MAX_LAYER_NODES = 10


def fanout_groups(
    agent_of: Mapping[Hashable, str],
    edges: Iterable[tuple[Hashable, Hashable]],
    *,
    min_size: int = GROUP_MIN_SIZE,
) -> list[list[Hashable]]:
    """Siblings that share the same upstream set and the same agent, `min_size` or more of them.

    Nodes are taken in the order of `agent_of`; each group lists its members in that order, and
    groups come in the order of their first member. A node belongs to at most one group.
    """
    ups: dict[Hashable, set] = {node: set() for node in agent_of}
    for upstream, downstream in edges:
        if downstream in ups:
            ups[downstream].add(upstream)
    buckets: dict[tuple, list] = {}
    for node, agent in agent_of.items():
        buckets.setdefault((agent, frozenset(ups[node])), []).append(node)
    return [members for members in buckets.values() if len(members) >= min_size]


def collapsed_by_default(
    nodes: Sequence[Hashable],
    edges: Iterable[tuple[Hashable, Hashable]],
    groups: Sequence[Sequence[Hashable]],
    *,
    max_layer: int = MAX_LAYER_NODES,
) -> set[int]:
    """Indexes of the groups to show collapsed: the largest group of the widest layer, then the
    next, until every layer shows at most `max_layer` nodes (or nothing is left to collapse).

    Members of a group share their upstreams, so a group lies within one layer of the DAG.
    """
    layer_of = {node: depth for depth, layer in enumerate(dag.layers(list(nodes), list(edges))) for node in layer}
    width = Counter(layer_of.values())
    collapsed: set[int] = set()
    while width:
        depth, widest = max(width.items(), key=lambda item: (item[1], -item[0]))
        if widest <= max_layer:
            break
        candidates = [i for i, g in enumerate(groups) if i not in collapsed and layer_of[g[0]] == depth]
        if not candidates:
            width.pop(depth)  # nothing (more) to collapse in this layer: look at the others
            continue
        biggest = max(candidates, key=lambda i: (len(groups[i]), -i))
        collapsed.add(biggest)
        width[depth] -= len(groups[biggest]) - 1
    return collapsed


GROUP_MODES = ("fanout", "agent", "step")


def agent_step_groups(
    agent_of: Mapping[Hashable, str], edges: Iterable[tuple[Hashable, Hashable]], *, min_size: int = 2
) -> list[list[Hashable]]:
    """The tasks of one agent within one step (layer) of the DAG, `min_size` or more of them,
    step by step, in the order of `agent_of` within each."""
    groups = []
    for layer in dag.layers(list(agent_of), list(edges)):
        by_agent: dict[str, list[Hashable]] = {}
        for node in layer:
            by_agent.setdefault(agent_of[node], []).append(node)
        groups += [members for members in by_agent.values() if len(members) >= min_size]
    return groups


def step_groups(nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]]) -> list[list[Hashable]]:
    """Every step (layer) of the DAG with two tasks or more."""
    return [layer for layer in dag.layers(list(nodes), list(edges)) if len(layer) >= 2]


def widest_layer(
    nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]], collapsed: Iterable[Sequence[Hashable]]
) -> int:
    """How many nodes the widest layer shows when each group of `collapsed` is drawn as one."""
    edges = list(edges)
    shown = {node: node for node in nodes}
    for index, members in enumerate(collapsed):
        for member in members:
            shown[member] = ("group", index)
    widths = [len({shown[node] for node in layer}) for layer in dag.layers(list(nodes), edges)]
    return max(widths, default=0)


def default_mode(
    nodes: Sequence[Hashable],
    edges: Iterable[tuple[Hashable, Hashable]],
    fanouts_collapsed: Iterable[Sequence[Hashable]],
    *,
    max_layer: int = MAX_LAYER_NODES,
) -> str:
    """`fanout` when collapsing fan-outs leaves every layer readable, else `agent`."""
    return "fanout" if widest_layer(nodes, edges, fanouts_collapsed) <= max_layer else "agent"


@dataclass
class Graph:
    nodes: list[dict]
    edges: list[dict]
    groups: list[dict]
    mode: str = "fanout"  # the grouping the page starts with

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "edges": self.edges, "groups": self.groups, "mode": self.mode}


def graph(run: Run | int) -> Graph:
    """Nodes (one per task, id `t<task pk>`), dependency edges and fan-out groups, for the DAG view.

    Node states are not here: the page reads them from the task rows it keeps up to date, so the
    structure is sent once and the states as they change.
    """
    run = run if isinstance(run, Run) else Run.objects.get(pk=run)
    tasks = list(tasks_query(run.pk))
    task_of_subtask = {t.subtask_id: t for t in tasks}
    pairs = [
        (task_of_subtask[up].pk, task_of_subtask[down].pk)
        for up, down in Dependency.objects.filter(plan_id=run.plan_id)
        .order_by("pk")
        .values_list("upstream_id", "downstream_id")
        if up in task_of_subtask and down in task_of_subtask
    ]
    agent_of = {t.pk: t.agent.name for t in tasks}
    groups = fanout_groups(agent_of, pairs)
    collapsed = collapsed_by_default([t.pk for t in tasks], pairs, groups)
    by_pk = {t.pk: t for t in tasks}
    step_of = {pk: depth for depth, layer in enumerate(dag.layers(list(agent_of), pairs), start=1) for pk in layer}
    group_of = {}
    group_dicts = []
    for index, members in enumerate(groups, start=1):
        gid = f"g{index}"
        first = by_pk[members[0]]
        group_dicts.append(
            {
                "id": gid,
                "mode": "fanout",
                "agent": first.agent.name,
                "members": [f"t{pk}" for pk in members],
                "size": len(members),
                "label": f"{len(members)} × {first.agent.name}",
                "collapsed": index - 1 in collapsed,
            }
        )
        for pk in members:
            group_of[pk] = gid
    for index, members in enumerate(agent_step_groups(agent_of, pairs), start=1):
        agent = agent_of[members[0]]
        group_dicts.append(
            {
                "id": f"a{index}",
                "mode": "agent",
                "agent": agent,
                "members": [f"t{pk}" for pk in members],
                "size": len(members),
                "label": f"{len(members)} × {agent} · step {step_of[members[0]]}",
                "collapsed": True,
            }
        )
    for index, members in enumerate(step_groups(list(agent_of), pairs), start=1):
        group_dicts.append(
            {
                "id": f"s{index}",
                "mode": "step",
                "agent": "",
                "members": [f"t{pk}" for pk in members],
                "size": len(members),
                "label": f"Step {step_of[members[0]]} · {len(members)} tasks",
                "collapsed": True,
            }
        )
    nodes = [
        {
            "id": f"t{t.pk}",
            "task": t.pk,
            "key": t.subtask.key,
            "title": t.subtask.title,
            "agent": t.agent.name,
            "group": group_of.get(t.pk),
        }
        for t in tasks
    ]
    edges = [{"id": f"e{up}-{down}", "source": f"t{up}", "target": f"t{down}"} for up, down in pairs]
    mode = default_mode(list(agent_of), pairs, [groups[i] for i in collapsed])
    return Graph(nodes=nodes, edges=edges, groups=group_dicts, mode=mode)


def upstream_tasks(task: TaskRun) -> list[TaskRun]:
    """The tasks `task` depends on directly, in plan order (what it receives summaries from)."""
    ids = Dependency.objects.filter(downstream_id=task.subtask_id).values_list("upstream_id", flat=True)
    return list(
        TaskRun.objects.filter(run_id=task.run_id, subtask_id__in=list(ids))
        .select_related("subtask", "agent")
        .order_by("subtask__position")
    )


def final_tasks(run: Run) -> list[TaskRun]:
    """The plan's sinks (tasks nothing depends on): the run's result."""
    with_downstream = Dependency.objects.filter(plan_id=run.plan_id).values("upstream_id")
    return list(tasks_query(run.pk).exclude(subtask_id__in=with_downstream))


@fixed_once_approved
def final_task_ids(run: Run) -> frozenset[int]:
    """The ids of final_tasks (asked at every live frame)."""
    with_downstream = Dependency.objects.filter(plan_id=run.plan_id).values("upstream_id")
    finals = TaskRun.objects.filter(run_id=run.pk).exclude(subtask_id__in=with_downstream)
    return frozenset(finals.values_list("pk", flat=True))
