"""Command line of the benchmark, shared by `python manage.py bench_scheduler` and `python -m bench`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import harness

ROOT = harness.ROOT
PROFILES = ("embedded", "production")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one small layered DAG at cap 4, one repeat, embedded profile (under a minute)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the headline numbers) on stdout; progress goes to stderr",
    )
    parser.add_argument(
        "--profiles", default=None, help="comma-separated: embedded, production (default: both; --quick: embedded)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the full run (default 3)")
    parser.add_argument(
        "--duration-scale",
        type=float,
        default=1.0,
        help="multiply every DAG's task durations (default 1; 2 = half the load per second)",
    )
    parser.add_argument(
        "--out", default=None, help="write the full results here (default for the full run: bench/results.json)"
    )
    parser.add_argument(
        "--no-report", action="store_true", help="full run: do not write docs/benchmarks.md and docs/benchmarks/*.png"
    )
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the databases (the embedded file, the PostgreSQL database), logs and traces",
    )
    parser.add_argument(
        "--dags", default=None, help="full run: only these DAGs, comma-separated (layered, fan, chain, random)"
    )
    parser.add_argument("--caps", default=None, help="full run: only these caps, comma-separated (default 8,64)")
    parser.add_argument(
        "--skip",
        default="",
        help="full run: leave out parts, comma-separated: peer (Prefect), width, storm, live (for quick looks)",
    )


def config_from(options: dict) -> harness.Config:
    names = options.get("profiles")
    profiles = (
        [p.strip() for p in names.split(",") if p.strip()]
        if names
        else (["embedded"] if options["quick"] else list(PROFILES))
    )
    for name in profiles:
        if name not in PROFILES:
            raise harness.BenchError(f"unknown profile {name!r}: use {' or '.join(PROFILES)}")
    if options["repeats"] < 1:
        raise harness.BenchError(f"--repeats must be at least 1, got {options['repeats']}")
    if options["duration_scale"] <= 0:
        raise harness.BenchError(f"--duration-scale must be positive, got {options['duration_scale']}")
    config = harness.quick_config(profiles) if options["quick"] else harness.full_config(profiles, options["repeats"])
    config.duration_scale = options["duration_scale"]
    if options.get("dags"):
        kinds = [k.strip() for k in options["dags"].split(",") if k.strip()]
        unknown = sorted(set(kinds) - {spec.kind for spec in config.dag_specs})
        if unknown:
            raise harness.BenchError(f"--dags: unknown DAG {', '.join(unknown)}")
        config.dag_specs = [spec for spec in config.dag_specs if spec.kind in kinds]
    if options.get("caps"):
        try:
            config.caps = [int(c) for c in options["caps"].split(",") if c.strip()]
        except ValueError:
            raise harness.BenchError(f"--caps: whole numbers, comma-separated, got {options['caps']!r}") from None
        config.gantt = (config.gantt[0], config.caps[0])
    skipped = {part.strip() for part in (options.get("skip") or "").split(",") if part.strip()}
    unknown_parts = skipped - {"peer", "width", "storm", "live"}
    if unknown_parts:
        raise harness.BenchError(f"--skip: unknown part {', '.join(sorted(unknown_parts))}")
    if "peer" in skipped:
        config.peer = False
    if "width" in skipped:
        config.width = None
    if "storm" in skipped:
        config.storm = None
    if "live" in skipped:
        config.live_view = None
    return config


def run(options: dict, stdout=sys.stdout) -> dict:
    config = config_from(options)
    results = harness.run_benchmark(config, keep_workdir=options.get("keep_workdir", False))
    out = options.get("out") or (None if config.mode == "quick" else str(ROOT / "bench" / "results.json"))
    if config.mode == "full" and not options.get("no_report"):
        from . import report

        report.write(results, Path(out), ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "benchmarks")
        harness.log(f"wrote {out}, docs/benchmarks.md and docs/benchmarks/*.png")
    elif out:
        Path(out).write_text(json.dumps(results, indent=1) + "\n")
        harness.log(f"wrote {out}")
    headline = {**results["summary"]["headline"], "elapsed_s": results["elapsed_s"]}
    if options.get("json"):
        stdout.write(json.dumps(headline) + "\n")
    else:
        stdout.write(human_summary(results) + "\n")
    return results


def human_summary(results: dict) -> str:
    lines = []
    for name, table in results["summary"]["dags"].items():
        lines.append(f"profile {name}:")
        for r in table:
            lines.append(
                f"  {r['dag_name']:>14} cap {r['cap']:>2}: makespan {r['makespan_s']:.2f} s, bound {r['lower_bound_s']:.2f} s, "
                f"efficiency {r['efficiency']:.3f}, ours/waves {r['vs_waves'] if r['vs_waves'] is not None else '-'}, "
                f"dispatch p95 {r['dispatch_p95_ms']:.0f} ms"
            )
    failed = [g for g in results["summary"]["goals"] if not g["met"]]
    if results["summary"]["goals"]:
        lines.append(
            f"goals met: {len(results['summary']['goals']) - len(failed)} of {len(results['summary']['goals'])}"
        )
        lines += [f"  not met: {g['goal']}: {g['measured']}" for g in failed]
    lines.append(f"elapsed {results['elapsed_s']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="The Glassbox scheduler benchmark")
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        run(options)
    except harness.BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
