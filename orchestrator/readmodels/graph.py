"""The run page's DAG: nodes, edges and wide fan-outs detected as collapsible groups.

Also the run's structure as tasks: a task's upstream tasks, and the final tasks (the plan's
sinks), whose outputs are the run's result. `fanout_groups` and `collapsed_by_default` take
plain data and are tested without a database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.models import Dependency, Run, TaskRun
from orchestrator.plans import dag

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


@dataclass
class Graph:
    nodes: list[dict]
    edges: list[dict]
    groups: list[dict]

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "edges": self.edges, "groups": self.groups}


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
    groups = fanout_groups({t.pk: t.agent.name for t in tasks}, pairs)
    collapsed = collapsed_by_default([t.pk for t in tasks], pairs, groups)
    by_pk = {t.pk: t for t in tasks}
    group_of = {}
    group_dicts = []
    for index, members in enumerate(groups, start=1):
        gid = f"g{index}"
        first = by_pk[members[0]]
        group_dicts.append(
            {
                "id": gid,
                "agent": first.agent.name,
                "members": [f"t{pk}" for pk in members],
                "size": len(members),
                "label": f"{len(members)} × {first.agent.name}",
                "collapsed": index - 1 in collapsed,
            }
        )
        for pk in members:
            group_of[pk] = gid
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
    return Graph(nodes=nodes, edges=edges, groups=group_dicts)


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


def final_task_ids(run: Run) -> set[int]:
    with_downstream = Dependency.objects.filter(plan_id=run.plan_id).values("upstream_id")
    finals = TaskRun.objects.filter(run_id=run.pk).exclude(subtask_id__in=with_downstream)
    return set(finals.values_list("pk", flat=True))
