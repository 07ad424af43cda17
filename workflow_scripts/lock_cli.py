"""``python -m workflow_scripts lock``: resolve every hub ref of the registry to a commit, once.

    python -m workflow_scripts lock              # before the first paper-scale download
    python -m workflow_scripts lock --update     # move every ref to the hub's commit of today

A top-level command, like ``plan``: it loads the registry as the workflow does and runs no rule.
It writes ``hub.lock.yaml`` beside ``config.yaml`` (a user commits both), which the download rules
read: their params then hold the commit whether config.yaml names ``main`` or that commit.
"""

from __future__ import annotations

import argparse

from workflow_scripts import hub
from workflow_scripts.atomic import write_text
from workflow_scripts.commands import add_registry_arguments, registry_config
from workflow_scripts.errors import UserInputError


def register(stages: argparse._SubParsersAction) -> None:
    summary = (
        "resolve every hub ref (main, a branch or tag) of the registry's datasets, models and "
        f"benchmarks to a commit and write {hub.LOCK_FILE}, which the download rules read"
    )
    parser = stages.add_parser("lock", help=summary, description=summary)
    add_registry_arguments(parser)
    parser.add_argument(
        "--lock",
        default=hub.LOCK_FILE,
        help=f"lock file to write (default: {hub.LOCK_FILE}, beside config.yaml)",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="look up every ref again, moving locked ones to the hub's current commit (their downloads "
        "and everything after them then rerun); without it a ref already locked keeps its commit",
    )
    parser.set_defaults(
        run=run, command="lock", provenance=None, inputs=(), outputs=("lock",), input_kinds={}
    )


def run(args: argparse.Namespace) -> None:
    """Resolve the refs the lock lacks (all with ``--update``), print each, write the lock."""
    config = registry_config(args)
    try:
        import huggingface_hub
    except ImportError as error:
        raise UserInputError(f"lock needs 'huggingface_hub' ({error}); install envs/data.yaml") from error
    sources = hub.hub_sources(config)
    old = hub.read_lock(args.lock)
    lock, done = hub.resolve_lock(sources, old, hub.hub_resolver(huggingface_hub.HfApi()), update=args.update)
    for item in done:
        print(f"{item.status:8}  {item.repo_type:7}  {item.repo}@{item.ref} -> {item.commit}")
    pinned = sum(source.pinned for source in sources)
    write_text(args.lock, hub.lock_text(lock))
    resolved = sum(item.status == "resolved" for item in done)
    print(
        f"{args.lock}: {len(lock)} refs locked ({resolved} looked up now, {len(done) - resolved} kept); "
        f"{pinned} of {len(sources)} revisions are commits in the config already. Commit {args.lock}."
    )
