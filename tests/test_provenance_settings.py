"""The arguments today's configuration gives each recorded job, read from Snakemake's own dry run."""

from __future__ import annotations

import argparse

import pytest

from tests.conftest import load_config
from tests.dag import ROOT
from workflow_scripts.cli import build_parser
from workflow_scripts.errors import UserInputError
from workflow_scripts.provenance import settings as job_settings
from workflow_scripts.provenance.settings import current_commands

TOY_FILES = ["config.yaml", "profiles/local/toy.yaml"]
TABLE6 = "results/provenance/table6.json"


def settings_by_record(commands: list[str]) -> dict:
    """``settings_by_record`` with the entry point's own stage parsers, as the audit command passes them."""
    actions = build_parser()._actions
    (stages,) = (action for action in actions if isinstance(action, argparse._SubParsersAction))
    return job_settings.settings_by_record(commands, stages.choices)


@pytest.mark.slow
def test_every_recording_job_of_a_toy_table_gets_its_arguments_as_the_rule_passes_them():
    settings = settings_by_record(current_commands([TABLE6], TOY_FILES, ROOT))
    toy = load_config(toy=True)
    training = settings["results/checkpoints/moonlight/math20k/rpb/s42.provenance.json"]
    assert training["training"]["schedule"]["lr_max"] == toy["training"]["schedule"]["lr_max"]
    assert settings["results/tables/table6.provenance.json"]["id"] == "table6"
    assert "results/raw/glm51/Math.provenance.json" in settings  # the toy raw source records itself
    assert all("provenance" not in arguments for arguments in settings.values())


@pytest.mark.slow
def test_a_config_overlay_changes_the_arguments_of_exactly_the_jobs_it_reaches(tmp_path):
    overlay = tmp_path / "lr.yaml"
    overlay.write_text("training:\n  schedule: {lr_max: 2.0e-3}\n")
    before = settings_by_record(current_commands([TABLE6], TOY_FILES, ROOT))
    after = settings_by_record(current_commands([TABLE6], [*TOY_FILES, str(overlay)], ROOT))
    changed = sorted(record for record in before if before[record] != after[record])
    assert changed and all(record.startswith("results/checkpoints/") for record in changed)


def test_a_launchers_inner_command_is_parsed_as_its_own_call():
    plot = "report figure-plot --id figure2 --data d.csv --png a.png --pdf b.pdf"
    shell = (
        f"(python -m workflow_scripts {plot} > log 2>&1 &&"
        " OMP_NUM_THREADS=8 python -m workflow_scripts train megatron-launch --nodes 2 --gpus-per-node 8"
        f" -- {plot} --provenance 'rec ord.json') >> log 2>&1"
    )
    settings = settings_by_record([shell])
    fields = {"id": "figure2", "data": "d.csv", "png": "a.png", "pdf": "b.pdf"}
    assert settings == {"rec ord.json": {"stage": "report", "command": "figure-plot", **fields}}


def test_a_command_the_parser_refuses_is_a_clear_error():
    with pytest.raises(UserInputError, match="cannot parse the command a rule runs today"):
        settings_by_record(["python -m workflow_scripts priors no-such-command --provenance r.json"])


@pytest.mark.slow
def test_a_paper_scale_megatron_training_is_read_from_its_launch_line():
    """Its record is written by the command ``megatron-launch`` starts after ``--`` on every node."""
    settings = settings_by_record(current_commands(["results/provenance/table5.json"], ["config.yaml"], ROOT))
    training = settings["results/megatron/trained/moonlight/math20k/rpb/s44.provenance.json"]
    assert (training["stage"], training["command"]) == ("train", "megatron")
    assert training["condition"] == {"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"}
