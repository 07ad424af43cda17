"""Which stage environment each rule runs in (its ``envmodules:`` in ``rules/``), and the check that a
run's jobs ran there, from the interpreter each job's provenance record names.

Used by the toy target of tests/test_environments.py and by the rehearsal (tests/test_rehearsal_run.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.dag import ROOT

#: A rule's whole body in a ``rules/*.smk`` file.
RULE = re.compile(r"^rule (\w+):\n((?:(?:    .*)?\n)*)", re.MULTILINE)
#: The stage module a rule loads: ``rpb/<stage>``, or the Megatron rules' ``*MEGATRON_MODULES``
#: (``rpb/megatron``, none where they run in the container).
_MODULE = re.compile(r'envmodules:\n\s+(?:"rpb/(\w+)"|\*(MEGATRON_MODULES))')
#: The ``python -m workflow_scripts <group> <command>`` a rule's shell runs.
_COMMAND = re.compile(r"workflow_scripts (\S+ \S+)")
#: What the Megatron launcher (``train megatron-launch``) runs on each node, as its records name it.
_LAUNCHED = {"train megatron-launch": "train megatron"}


def rule_bodies() -> dict[str, tuple[str, str]]:
    """Each rule's ``(file name, body)``."""
    return {
        rule: (smk.name, body)
        for smk in sorted((ROOT / "rules").glob("*.smk"))
        for rule, body in RULE.findall(smk.read_text())
    }


def rule_environments() -> dict[str, str]:
    """Each rule's stage environment, read from its ``envmodules:`` directive."""
    environments = {}
    for rule, (_, body) in rule_bodies().items():
        found = _MODULE.search(body)
        if found:
            environments[rule] = found.group(1) or "megatron"
    return environments


def command_environments() -> dict[str, set[str]]:
    """The stage environments each ``workflow_scripts`` command runs in, by the rules that run it."""
    environments, by_command = rule_environments(), {}
    for rule, (_, body) in rule_bodies().items():
        command = _COMMAND.search(body)
        if command and rule in environments:
            name = _LAUNCHED.get(command.group(1), command.group(1))
            by_command.setdefault(name, set()).add(environments[rule])
    return by_command


def environments_of_run(results: Path, venvs: Path) -> set[str]:
    """The stage environments a run's jobs ran in, each job's checked against its command's.

    ``venvs`` holds one environment (or a link to it) per stage; a job's record names its
    interpreter's prefix, compared with the stage's environment once both are resolved.
    """
    expected_by_command, seen = command_environments(), set()
    for record_path in results.rglob("*provenance.json"):
        record = json.loads(record_path.read_text())
        if "command" not in record:  # a table's manifest, not a job record
            continue
        expected = expected_by_command[record["command"]]
        prefix = Path(record["software"]["prefix"]).resolve()
        ran_in = [stage for stage in expected if (venvs / stage).resolve() == prefix]
        assert ran_in, f"{record_path}: ran in {prefix}, not in the environment of {sorted(expected)}"
        seen.update(ran_in)
    return seen
