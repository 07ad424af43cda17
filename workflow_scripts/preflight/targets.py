"""What a run needs from outside the cluster: its tables and figures, and the hub repositories behind them.

From the command line, targets are registry ids (``table5``, ``all``) and their hub repositories
come from the registry's closure. Inside a Snakemake run (the ``onstart`` hook) they come from
the DAG: the requested files and rules, and the wildcards of its download jobs, so that a run
that downloads nothing (the Megatron launch check) checks no repository.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workflow_scripts import compute_plan, hub, registry
from workflow_scripts.layout import RESULTS
from workflow_scripts.registry import Closure

ALL = "all"
#: The registry section a download rule reads its repository from, and the wildcard naming the entry.
DOWNLOAD_RULES = {
    "download_dataset": ("datasets", "dataset"),
    "download_model": ("models", "model"),
    "download_benchmark": ("benchmarks", "benchmark"),
}
_OUTPUT_FILE = re.compile(rf"(?:.*/)?{RESULTS}/(?:tables|figures|provenance)/([a-z0-9_]+)\.[a-z.]+")


def of_run(config: Mapping[str, Any], files: Iterable[str], rules: Iterable[str]) -> list[str]:
    """The tables and figures a Snakemake run was asked for, sorted: ``all`` for that rule,
    ``rehearsal`` for the rehearsal's default rule."""
    outputs = registry.outputs(config)
    ids = {match[1] for file in files if (match := _OUTPUT_FILE.fullmatch(str(file))) and match[1] in outputs}
    named = [rule for rule in (ALL, registry.REHEARSAL) if rule in set(rules)]
    return named[:1] or sorted(ids)


def closures(config: Mapping[str, Any], ids: Sequence[str]) -> list[Closure]:
    """The closure of each target: every table's and figure's for ``all``, the rehearsal's own."""
    if ALL in ids:
        return [registry.closure(config, output) for output in registry.outputs(config)]
    return [compute_plan.target_closure(config, target) for target in ids]


@dataclass(frozen=True)
class HubRepo:
    """One hub repository at one revision, and the registry entries (``benchmarks.gpqa.hub``) naming it.

    ``revision`` is what a download fetches: ``configured`` (config.yaml's) where that is a
    commit, else the commit ``hub.lock.yaml`` resolved it to, else the ref itself (unlocked).
    """

    kind: str  # "model" or "dataset", the hub's repository type
    repo: str
    revision: str
    configured: str
    keys: tuple[str, ...]
    gated: bool


def hub_entries_of_jobs(jobs: Iterable[tuple[str, Mapping[str, str]]]) -> list[tuple[str, str]]:
    """(section, entry) of every download job among ``jobs`` (rule name, wildcards), in order, once each."""
    entries = []
    for rule, wildcards in jobs:
        if rule in DOWNLOAD_RULES:
            section, wildcard = DOWNLOAD_RULES[rule]
            entries.append((section, wildcards[wildcard]))
    return list(dict.fromkeys(entries))


def hub_entries_of_targets(config: Mapping[str, Any], ids: Sequence[str]) -> list[tuple[str, str]]:
    """(section, entry) of every hub source the closure of ``ids`` downloads; none at toy scale.

    A corpus reads its dataset; a trained, probed or evaluated model its base; an evaluation
    every benchmark (the suite is one input of every evaluation).
    """
    if config["scale"] != "paper":
        return []
    found = closures(config, ids)
    corpora = sorted({corpus for closure in found for corpus in closure.corpora})
    models = sorted(
        {
            unit.model
            for closure in found
            for unit in (*closure.trainings, *closure.probes, *closure.priors, *closure.evaluations)
        }
    )
    entries = [("datasets", config["corpora"][corpus]["dataset"]) for corpus in corpora]
    entries += [("models", model) for model in models]
    if any(closure.evaluations for closure in found):
        entries += [("benchmarks", name) for name in config["benchmarks"]]
    return [(section, name) for section, name in dict.fromkeys(entries) if "hub" in config[section][name]]


def hub_repos(config: Mapping[str, Any], entries: Iterable[tuple[str, str]], lock: hub.Lock) -> list[HubRepo]:
    """The distinct (type, repository, revision) of ``entries``, in order, each with every entry naming it.

    The revision is the download rules' (``hub.locked_revision``): the same commit whether
    config.yaml names it or the lock resolves config.yaml's ref to it.
    """
    grouped: dict[tuple[str, str, str, str], list[tuple[str, Mapping[str, Any]]]] = {}
    for section, name in entries:
        source = hub.hub_source(config, section, name)
        key = (source.repo_type, source.repo, hub.locked_revision(source, lock), source.revision)
        grouped.setdefault(key, []).append((f"{section}.{name}.hub", config[section][name]))
    return [
        HubRepo(
            kind,
            repo,
            revision,
            configured,
            tuple(key for key, _ in named),
            any(e.get("gated") for _, e in named),
        )
        for (kind, repo, revision, configured), named in grouped.items()
    ]


def megatron_rules(config: Mapping[str, Any], rules: Iterable[str]) -> bool:
    """Whether a run of ``rules`` submits a Megatron training or its launch check (the multi-node jobs)."""
    return config["training"]["backend"] == "megatron" and bool(
        {"train_megatron", "megatron_launch_check"} & set(rules)
    )


def trains_with_megatron(config: Mapping[str, Any], ids: Sequence[str]) -> bool:
    """Whether the closure of ``ids`` holds a training, at the cluster backend."""
    if config["training"]["backend"] != "megatron":
        return False
    return any(closure.trainings for closure in closures(config, ids))
