"""The report's figures (matplotlib, the `bench` extra): makespan against cap, a Gantt chart, the storm."""

from __future__ import annotations

from pathlib import Path

IMAGES = ("makespan", "gantt", "storm")
COLOURS = {
    "embedded": "#1f77b4",
    "production": "#2ca02c",
    "waves": "#d62728",
    "naive": "#9467bd",
    "bound": "#222222",
    "policy": "#7f7f7f",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def makespan_against_cap(results: dict, path: Path) -> Path | None:
    plt = _pyplot()
    tables = results["summary"]["dags"]
    if not tables:
        return None
    kinds = []
    for table in tables.values():
        for row in table:
            if row["dag"] not in kinds:
                kinds.append(row["dag"])
    columns = 2 if len(kinds) > 1 else 1
    rows_n = (len(kinds) + columns - 1) // columns
    fig, axes = plt.subplots(rows_n, columns, figsize=(6.2 * columns, 4.2 * rows_n), squeeze=False)
    for index, kind in enumerate(kinds):
        ax = axes[index // columns][index % columns]
        reference = None
        for name, table in tables.items():
            rows = [r for r in table if r["dag"] == kind]
            caps = [r["cap"] for r in rows]
            ax.plot(caps, [r["makespan_s"] for r in rows], "o-", color=COLOURS.get(name), label=f"ours ({name})", lw=2)
            reference = reference or rows
        caps = [r["cap"] for r in reference]
        if any(r["waves_s"] for r in reference):
            ax.plot(caps, [r["waves_s"] for r in reference], "s--", color=COLOURS["waves"], label="waves")
        naive = [r["naive_s"] for r in reference if r["naive_s"]]
        if naive:
            ax.axhline(naive[0], color=COLOURS["naive"], ls=":", label="naive (no cap)")
        ax.plot(caps, [r["policy_s"] for r in reference], "^:", color=COLOURS["policy"], label="policy, zero overhead")
        ax.plot(caps, [r["lower_bound_s"] for r in reference], "k-", lw=1, label="lower bound")
        ax.set_title(f"{reference[0]['dag_name']} ({reference[0]['nodes']} nodes)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(caps, [str(c) for c in caps])
        ax.set_xlabel("cap (tasks at once)")
        ax.set_ylabel("makespan (s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for index in range(len(kinds), rows_n * columns):
        axes[index // columns][index % columns].axis("off")
    fig.suptitle("Makespan against cap (median of repeats)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def gantt_run(results: dict) -> tuple[str, dict] | None:
    """The run drawn as a Gantt chart: the configured one, on the production profile if it ran."""
    for name in sorted(results["profiles"], key=lambda n: n != "production"):
        for row in results["profiles"][name]["ours"]:
            if row.get("timeline"):
                return name, row
    return None


def gantt(results: dict, path: Path) -> tuple[Path, str] | None:
    found = gantt_run(results)
    if found is None:
        return None
    profile, run = found
    plt = _pyplot()
    timeline = run["timeline"]
    workers = sorted(
        {t["worker"] for t in timeline}, key=lambda w: min(t["start"] for t in timeline if t["worker"] == w)
    )
    lane = {w: i for i, w in enumerate(workers)}
    layers = sorted({t["key"].split("_")[0] for t in timeline})
    cmap = plt.get_cmap("viridis", max(2, len(layers)))
    colour = {layer: cmap(i) for i, layer in enumerate(layers)}
    fig, ax = plt.subplots(figsize=(12, 0.35 * len(workers) + 2.2))
    for t in timeline:
        y = lane[t["worker"]]
        ax.barh(
            y,
            t["end"] - t["start"],
            left=t["start"],
            height=0.7,
            color=colour[t["key"].split("_")[0]],
            edgecolor="white",
            linewidth=0.4,
        )
        ax.plot([t["ready"], t["start"]], [y, y], color="#d62728", lw=1.2)  # waiting to be claimed (or for a slot)
    ax.axvline(run["lower_bound_s"], color="k", ls="--", lw=1, label=f"lower bound {run['lower_bound_s']:.1f} s")
    ax.axvline(run["makespan_s"], color="#d62728", ls="-", lw=1, label=f"makespan {run['makespan_s']:.1f} s")
    ax.set_yticks(range(len(workers)), [f"worker {i + 1}" for i in range(len(workers))], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since launch")
    ax.set_title(
        f"{run['dag_name']} at cap {run['cap']}, profile {profile}: one bar per task on the worker process "
        "that ran it (colour = layer), red = ready but not yet claimed",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    caption = (
        f"Gantt chart of one run: {run['dag_name']} at cap {run['cap']} on the {profile} profile (first repeat), "
        f"efficiency {run['efficiency']:.3f}. Workers are the qcluster's processes; a worker that finishes a task "
        "runs the next one it admitted itself, so chains of tasks stay on one lane."
    )
    return path, caption


def storm(results: dict, path: Path) -> Path | None:
    rows = []
    for name, profile in results["profiles"].items():
        for row in profile.get("storm", []):
            if row["repeat"] == 0:
                rows.append((name, row))
    if not rows:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 2.1 * len(rows)), squeeze=False, sharex=True)
    for ax, (name, row) in zip((a[0] for a in axes), rows, strict=True):
        for i, t in enumerate(sorted(row["timeline"], key=lambda t: t["start"] if t["start"] is not None else 1e9)):
            if t["start"] is not None:
                ax.barh(i, t["end"] - t["start"], left=t["start"], height=0.7, color=COLOURS.get(name, "#1f77b4"))
            for at in t["rate_limited"]:
                ax.plot(at, i, "x", color="#d62728", ms=4)
        ax.axvline(row["bound_s"], color="k", ls="--", lw=1)
        ax.set_ylabel(row["strategy"].replace("_", "\n"), fontsize=8)
        ax.set_yticks([])
        ax.set_title(
            f"{name}: {row['strategy'].replace('_', ', ')}: {row['makespan_s']:.1f} s (bound {row['bound_s']:.1f} s), "
            f"{row['rate_limited']} x 429",
            fontsize=9,
            loc="left",
        )
    axes[-1][0].set_xlabel("seconds since the strategy started (dashed: the limit's bound)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_all(results: dict, directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    if (p := makespan_against_cap(results, directory / "makespan_vs_cap.png")) is not None:
        made["makespan"] = str(p)
    if (g := gantt(results, directory / "gantt.png")) is not None:
        made["gantt"], made["gantt_caption"] = str(g[0]), g[1]
    if (p := storm(results, directory / "storm.png")) is not None:
        made["storm"] = str(p)
    return made
