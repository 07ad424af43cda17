"""The experiment registry: schema, cross-references, and table closures against the captions."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import SCHEMA
from tests.dag import JOB_ENV, ROOT, TOY
from workflow_scripts import registry
from workflow_scripts.registry import Evaluation, Probe, RegistryError, Training, closure, validate_config


def test_shipped_configs_validate(paper_config, toy_config):
    validate_config(paper_config, str(SCHEMA))
    validate_config(toy_config, str(SCHEMA))


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ((), "sclae"),
        (("conditions", "rpb"), "parms"),
        (("training", "optimizer"), "beta_1"),
        (("tables", "table5", "cells", 0), "probe_seed"),
        (("models", "moonlight"), "topk"),
    ],
)
def test_misspelt_key_fails_naming_it(paper_config, path, key):
    node = paper_config
    for part in path:
        node = node[part]
    node[key] = 1
    with pytest.raises(
        RegistryError, match=rf"config key {'.'.join(map(str, path)) or '.top level.'}.*{key}"
    ):
        validate_config(paper_config, str(SCHEMA))


def test_mistyped_value_names_key(paper_config):
    # PyYAML reads "1.0e4" (no exponent sign) as a string: the schema must catch it.
    paper_config["conditions"]["router_l2"]["params"]["lambda"] = yaml.safe_load("1.0e4")
    with pytest.raises(RegistryError, match=r"config key conditions\.router_l2\.params\.lambda: '1.0e4'"):
        validate_config(paper_config, str(SCHEMA))


def test_unknown_intervention_fails(paper_config):
    paper_config["conditions"]["zloss"]["intervention"] = "zloss_v2"
    known = r"\(known: .*z_loss"
    with pytest.raises(
        RegistryError, match=rf"conditions\.zloss\.intervention: unknown intervention 'zloss_v2' {known}"
    ):
        validate_config(paper_config, str(SCHEMA))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["conditions"]["rpb"]["params"].pop("beta"), r"conditions\.rpb\.params: .* needs 'beta'"),
        (lambda c: c["conditions"]["sft"].update(params={"beta": 1.0}), r"conditions\.sft\.params\.beta"),
        (lambda c: c["conditions"]["kl_base"].pop("prior"), r"conditions\.kl_base: .* needs a 'prior'"),
        (lambda c: c["conditions"]["lbl"].update(prior="base"), r"conditions\.lbl\.prior"),
        # A router term reads a prior where it declares one, and then needs the condition's prior.
        (lambda c: c["router_terms"]["kl_base"].update(prior=False), r"kl_base\.prior: .* reads no prior"),
        (lambda c: c["router_terms"].update(rpb={"layers": "sum"}), r"router_terms\.rpb: .* built-in"),
        (lambda c: c["router_terms"]["z_loss"].update(layers="max"), r"router_terms\.z_loss\.layers: 'max'"),
        # Megatron-Core sums its own load-balancing loss over layers: a mean would train another loss.
        (
            lambda c: c["router_terms"]["load_balancing"].update(layers="mean"),
            r"router_terms\.load_balancing: .* local backend .* Megatron backend",
        ),
    ],
)
def test_intervention_parameters_checked(paper_config, edit, message):
    edit(paper_config)
    with pytest.raises(RegistryError, match=message):
        validate_config(paper_config, str(SCHEMA))


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("conditions", "within_sotf", "condition"),
        ("models", "moonlite", "model"),
        ("corpora", "math2k", "corpus"),
    ],
)
def test_table_naming_unknown_cell_fails(paper_config, field, value, kind):
    paper_config["tables"]["table5"]["cells"][1][field] = [value]
    with pytest.raises(
        RegistryError, match=rf"tables\.table5\.cells\[1\]\.{field}: unknown {kind} '{value}'"
    ):
        validate_config(paper_config, str(SCHEMA))


def test_corpus_naming_unknown_dataset_fails(paper_config):
    paper_config["corpora"]["math20k"]["dataset"] = "glm5"
    with pytest.raises(RegistryError, match=r"corpora\.math20k\.dataset: unknown dataset 'glm5'"):
        validate_config(paper_config, str(SCHEMA))


def test_toy_scale_requires_toy_sources(paper_config):
    paper_config["scale"] = "toy"
    with pytest.raises(RegistryError, match=r"datasets\.glm51: scale is toy"):
        validate_config(paper_config, str(SCHEMA))


def test_training_on_probe_only_pool_fails(paper_config):
    paper_config["tables"]["table2"]["cells"][0]["corpora"] = ["general"]
    with pytest.raises(RegistryError, match=r"probe-only pool"):
        validate_config(paper_config, str(SCHEMA))


def _objects(schema, path="schema"):
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            yield path, schema
        for key, value in schema.items():
            yield from _objects(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _objects(value, f"{path}[{index}]")


def test_schema_closed_and_documented():
    schema = yaml.safe_load(SCHEMA.read_text())
    objects = list(_objects(schema))
    assert len(objects) > 20
    for path, node in objects:
        assert node.get("additionalProperties") is False, f"{path} allows unknown keys"
        for name, prop in node["properties"].items():
            assert "description" in prop or "$ref" in prop, f"{path}.{name} has no description"


def test_registry_encodes_the_paper_grid(paper_config):
    c = paper_config
    assert {
        m: (c["models"][m]["experts"], c["models"][m]["top_k"], c["models"][m]["moe_layers"])
        for m in c["models"]
    } == {
        "moonlight": (64, 6, 26),
        "deepseek_v2_lite": (64, 6, 26),
        "qwen3_30b": (128, 8, 48),
    }
    assert len(c["benchmarks"]) == 12
    assert sorted(b for b, v in c["benchmarks"].items() if not v["overall9"]) == ["gpqa", "mmlu", "mmlu_stem"]
    families = {
        f: sorted(b for b, v in c["benchmarks"].items() if v["family"] == f) for f in ("math", "code")
    }
    assert families == {
        "math": ["gsm8k", "livebench_math", "math500"],
        "code": ["humaneval", "livebench_coding", "mbpp"],
    }
    interventions = {
        name: (v["intervention"], v.get("params"), v.get("prior")) for name, v in c["conditions"].items()
    }
    assert interventions["lbl"] == ("load_balancing", {"coefficient": 1e-3}, None)
    assert interventions["lbl_weak"] == ("load_balancing", {"coefficient": 1e-4}, None)
    assert {interventions[n][1]["beta"] for n in ("rpb_beta050", "rpb_beta075", "rpb")} == {0.5, 0.75, 1.0}
    assert {interventions[n][1]["lambda"] for n in ("router_l2_1e2", "router_l2_1e3", "router_l2")} == {
        1e2,
        1e3,
        1e4,
    }
    assert interventions["within_soft"] == ("rpb", {"beta": 1.0}, "shuffled_within")
    assert interventions["within_hard"] == ("rpb_hard", None, "shuffled_within")
    assert interventions["global_hard"] == ("rpb_hard", None, "shuffled_global")
    assert sorted(c["tables"]) == sorted(
        [*(f"table{i}" for i in range(1, 20)), "appendix_d2", "claims", "diagnostic_prior_topk"]
    )
    paper_figures = ["figure1", "figure2", "figure3"]
    extra_plots = ["beta_sweep", "coactivation_heatmaps", "rho_sensitivity"]
    assert sorted(c["figures"]) == sorted(paper_figures + extra_plots)


def test_table2_closure_is_its_caption(paper_config):
    # "Moonlight ... mean +- sd across three training seeds": 2 corpora x 3 conditions x 3 seeds.
    result = closure(paper_config, "table2")
    expected = {
        Training("moonlight", corpus, condition, seed)
        for corpus in ("math20k", "coding20k")
        for condition in ("sft", "lbl", "rpb")
        for seed in (42, 43, 44)
    }
    assert result.trainings == expected
    assert result.evaluations == {Evaluation(t.model, t.corpus, t.condition, t.seed) for t in expected}
    assert result.probes == frozenset()
    assert result.corpora == {"math20k", "coding20k"}


def test_table5_probes_three_seeds_for_rpb_two_for_shuffles(paper_config):
    result = closure(paper_config, "table5")
    probed = {(p.corpus, p.condition): set() for p in result.probes}
    for p in result.probes:
        probed[(p.corpus, p.condition)].add(p.seed)
    for corpus in ("math20k", "coding20k"):
        assert probed[(corpus, "rpb")] == {42, 43, 44}
        for control in ("within_soft", "within_hard", "global_hard"):
            assert probed[(corpus, control)] == {42, 43}
        assert probed[(corpus, "base")] == {None}
    kinds = {(p.corpus, p.kind) for p in result.priors}
    assert kinds == {
        (c, k) for c in ("math20k", "coding20k") for k in ("base", "shuffled_within", "shuffled_global")
    }
    assert len(result.trainings) == 2 * 4 * 3


def test_table19_coding_within_soft_falls_back_to_s43(paper_config):
    result = closure(paper_config, "table19")
    assert Training("deepseek_v2_lite", "coding20k", "within_soft", 43) in result.trainings
    assert Training("deepseek_v2_lite", "coding20k", "within_soft", 42) not in result.trainings
    assert Training("deepseek_v2_lite", "math20k", "within_soft", 42) in result.trainings


def test_base_only_tables(paper_config):
    table11 = closure(paper_config, "table11")
    assert table11.trainings == frozenset() and table11.evaluations == frozenset()
    assert table11.probes == {
        Probe(m, c, "base", None)
        for m in ("moonlight", "qwen3_30b")
        for c in ("math20k", "coding20k", "general")
    }
    table13 = closure(paper_config, "table13")
    assert table13.prior_validations == {("moonlight", "math20k"), ("moonlight", "coding20k")}
    assert table13.trainings == frozenset()
    table16 = closure(paper_config, "table16")
    assert Evaluation("moonlight", None, "base", None) in table16.evaluations


def test_every_output_has_a_closure(paper_config):
    for output_id in registry.outputs(paper_config):
        result = closure(paper_config, output_id)
        assert result.corpora or output_id == "table1"
    with pytest.raises(RegistryError, match="unknown table or figure 'table20'"):
        closure(paper_config, "table20")


def test_seed_cap_keeps_the_first_seeds_of_every_cell(paper_config):
    """The toy overlay's seeds_per_cell trims each cell's seeds, keeping a cell's only seed (s43)."""
    validate_config(paper_config, str(SCHEMA))
    paper_config["seeds_per_cell"] = 1
    registry.cap_seeds(paper_config)
    table5 = closure(paper_config, "table5")
    assert {t.seed for t in table5.trainings} == {42}
    table19 = closure(paper_config, "table19")
    coding_within_soft = {
        (t.corpus, t.condition, t.seed) for t in table19.trainings if t.condition == "within_soft"
    }
    assert coding_within_soft == {("math20k", "within_soft", 42), ("coding20k", "within_soft", 43)}


def test_no_seed_cap_keeps_the_paper_grid(paper_config):
    before = closure(paper_config, "table2")
    registry.cap_seeds(paper_config)
    assert closure(paper_config, "table2") == before
    assert len(before.trainings) == 2 * 3 * 3


def test_toy_model_sizes_take_experts_top_k_and_layers_from_the_registry(toy_config):
    model = toy_config["models"]["qwen3_30b"]
    sizes = registry.toy_model_sizes(model)
    assert (sizes["num_experts"], sizes["top_k"], sizes["shared_experts"]) == (
        model["experts"],
        model["top_k"],
        model["shared_experts"],
    )
    assert sizes["num_layers"] == model["toy"]["first_dense_layers"] + model["moe_layers"]
    assert {key: sizes[key] for key in model["toy"]} == model["toy"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["training"]["schedule"].update(lr_max=yaml.safe_load(".inf")),
         r"config key training\.schedule\.lr_max: inf is not a finite number"),
        (lambda c: c["conditions"]["rpb"]["params"].update(beta=yaml.safe_load(".nan")),
         r"config key conditions\.rpb\.params\.beta: nan is not a finite number"),
        (lambda c: c["training"]["schedule"].update(lr_min=1e-4),
         r"config key training\.schedule\.lr_min: 0\.0001 is above training\.schedule\.lr_max 1e-05"),
        (lambda c: c["training"]["schedule"].update(warmup_steps=1000),
         r"config key training\.schedule\.warmup_steps: 1000 warm-up steps exceed the 782 optimizer steps "
         r"of corpus coding20k"),
        (lambda c: c["models"]["moonlight"].update(top_k=65),
         r"config key models\.moonlight\.top_k: 65 is above models\.moonlight\.experts 64"),
        (lambda c: c["models"]["moonlight"]["hub"].update(keep_moe_layers=2),
         r"config key models\.moonlight\.hub\.keep_moe_layers: 2 differs from models\.moonlight\.moe_layers "
         r"26"),
        (lambda c: c["models"]["qwen3_30b"]["hub"].update(keep_moe_layers=0),
         r"config key models\.qwen3_30b\.hub\.keep_moe_layers: 0 is less than the minimum of 1"),
    ],
)  # fmt: skip
def test_values_that_cannot_work_are_refused(paper_config, edit, message):
    edit(paper_config)
    with pytest.raises(RegistryError, match=message):
        validate_config(paper_config, str(SCHEMA))


@pytest.mark.parametrize("key", ["shuffle_seeds", "detector_seeds", "edge_fraction_sweep"])
def test_an_empty_probe_list_is_refused_before_any_job(paper_config, key):
    """Empty, the shuffled-prior rules fail inside probe.smk, or retention averages over nothing."""
    paper_config["probe"][key] = []
    with pytest.raises(RegistryError, match=rf"probe\.{key}"):
        validate_config(paper_config, str(SCHEMA))


@pytest.mark.slow
def test_an_empty_shuffle_seed_list_stops_the_dry_run_naming_the_key(tmp_path):
    overlay = tmp_path / "empty.yaml"
    overlay.write_text("probe: {shuffle_seeds: []}\n")
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        *TOY,
        "--configfiles",
        "profiles/local/toy.yaml",
        str(overlay),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "probe.shuffle_seeds" in done.stdout + done.stderr
    assert "IndexError" not in done.stdout + done.stderr


def test_toy_pretraining_balance_for_an_unknown_model_is_refused(toy_config):
    toy_config["toy_base"]["lbl_coefficient_by_model"]["moonlite"] = 0.01
    with pytest.raises(RegistryError, match=r"toy_base\.lbl_coefficient_by_model\.moonlite: unknown model"):
        validate_config(toy_config, str(SCHEMA))


def test_toy_warmup_longer_than_pretraining_is_refused(toy_config):
    steps = toy_config["toy_base"]["steps"]
    toy_config["toy_base"]["warmup_steps"] = steps + 1
    message = rf"config key toy_base\.warmup_steps: {steps + 1} exceeds toy_base\.steps {steps}"
    with pytest.raises(RegistryError, match=message):
        validate_config(toy_config, str(SCHEMA))


def test_duplicate_yaml_keys_name_file_line_and_key(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "training:\n  epochs: 1\n  schedule: {lr_max: 1.0e-3}\n  epochs: 2\nseeds: [{a: 1, a: 2}]\n"
    )
    with pytest.raises(
        RegistryError, match=rf"{overlay}:4: duplicate config key training\.epochs .first set at line 2"
    ):
        registry.read_config_file(overlay)
    overlay.write_text("seeds: [{a: 1, a: 2}]\n")
    with pytest.raises(RegistryError, match=r":1: duplicate config key seeds\.0\.a"):
        registry.read_config_file(overlay)
    for path in registry.shipped_config_files(ROOT, toy=True):
        registry.read_config_file(path)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("scale: toy\ntraining:\n  epochs: [1, 2\n  global_batch_size: 8\n")
    with pytest.raises(RegistryError, match=rf"^{overlay}:4: not valid YAML"):
        registry.read_config_file(overlay)


def test_an_overlay_that_is_a_list_is_refused_naming_the_file(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("- scale: toy\n")
    with pytest.raises(
        RegistryError, match=rf"^{overlay}: a config file holds a mapping of keys, not a list"
    ):
        registry.load_config([ROOT / registry.CONFIG_FILE, overlay])


def test_load_config_lets_later_files_win_key_by_key(tmp_path):
    """Overlays merge as Snakemake merges them: a nested key replaces only itself; --config comes last."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("training: {schedule: {lr_max: 2.0e-5}}\nfork_server: true\n")
    base = registry.load_config([ROOT / registry.CONFIG_FILE])
    config = registry.load_config([ROOT / registry.CONFIG_FILE, overlay], {"fork_server": False})
    assert config["training"]["schedule"] == {**base["training"]["schedule"], "lr_max": 2e-5}
    assert config["fork_server"] is False


def test_load_config_validates_and_caps_seeds(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("seeds_per_cell: 1\n")
    config = registry.load_config([ROOT / registry.CONFIG_FILE, overlay])
    assert {t.seed for t in closure(config, "table2").trainings} == {42}
    overlay.write_text("training: {epochs: 0}\n")
    with pytest.raises(RegistryError, match=r"config key training\.epochs"):
        registry.load_config([ROOT / registry.CONFIG_FILE, overlay])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text.replace("fork_server: false", "fork_server: [false"),
         r"config\.yaml:\d+: not valid YAML"),
        (lambda text: "- " + text.replace("\n", "\n  "),
         r"config\.yaml: a config file holds a mapping of keys, not a list"),
    ],
)  # fmt: skip
def test_dry_run_refuses_a_broken_config_yaml_naming_file_and_line(tmp_path, edit, message):
    """The Snakefile reads config.yaml before Snakemake's loader, whose message names neither."""
    text = (ROOT / registry.CONFIG_FILE).read_text()
    broken = edit(text)
    (tmp_path / registry.CONFIG_FILE).write_text(broken)
    command = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=JOB_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    found = re.search(message, done.stderr + done.stdout)
    assert found, done.stderr[-2000:]
    if "not valid YAML" in message:  # where the parser gave up, and where the unclosed bracket opened
        opened = broken.splitlines().index("fork_server: [false") + 1
        assert f"while parsing a flow sequence at line {opened})" in done.stderr + done.stdout
    assert "rule " not in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "plan_says", "verbose_says"),
    [
        ("evaluation:\n  repeats: [1,\n", ":3: not valid YAML", 'bad.yaml", line 3, column 1'),
        ("- scale: toy\n", ": a config file holds a mapping of keys, not a list", None),
    ],
)
def test_a_configfile_snakemake_cannot_read_is_named_as_docs_local_says(
    tmp_path, text, plan_says, verbose_says
):
    """Snakemake reads --configfile before the workflow runs and names neither file nor line
    (docs/local.md); ``plan --overlay`` names both, and for a syntax error so does ``--verbose``."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    snakemake = [sys.executable, "-m", "snakemake", "-n", *TOY, "--configfile", str(bad), "--verbose"]
    done = subprocess.run(snakemake, cwd=ROOT, env=JOB_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "rule " not in done.stdout
    said = done.stderr + done.stdout
    assert "WorkflowError" in said and (verbose_says is None or verbose_says in said), said[-2000:]
    plan = [sys.executable, "-m", "workflow_scripts", "plan", "all", "--overlay", str(bad)]
    done = subprocess.run(plan, cwd=ROOT, env=JOB_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and f"error: {bad}{plan_says}" in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text + "scale: toy\n",
         r"toy\.yaml:\d+: duplicate config key scale \(first set at line 3"),
        (lambda text: text.replace("lr_max: 1.0e-3", "lr_max: .inf"),
         r"config key training\.schedule\.lr_max: inf is not a finite number"),
    ],
)  # fmt: skip
def test_dry_run_refuses_a_bad_overlay_before_any_job(tmp_path, edit, message):
    """Snakemake parses the overlay itself; the Snakefile must still refuse it before planning jobs."""
    overlay = tmp_path / "toy.yaml"
    text = (ROOT / registry.TOY_OVERLAY).read_text()
    assert "lr_max: 1.0e-3" in text
    overlay.write_text(edit(text))
    command = [sys.executable, "-m", "snakemake", "-n", *TOY, "--configfile", str(overlay)]
    done = subprocess.run(command, cwd=ROOT, env=JOB_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert re.search(message, done.stderr + done.stdout), done.stderr[-2000:]
    assert "rule " not in done.stdout  # refused before any job was planned


def test_optional_cells_are_built_only_where_included():
    """The claims' expert-bias sensitivity: in the toy run, at paper scale only where its overlay opts in."""
    frozen = {"sft_frozen_bias", "lbl_frozen_bias", "router_l2_frozen_bias"}

    def trained(files: list) -> set[str]:
        config = registry.load_config([ROOT / name for name in files])
        return {t.condition for t in closure(config, "claims").trainings}

    paper = [registry.CONFIG_FILE]
    assert not frozen & trained(paper)
    assert frozen <= trained([*paper, "profiles/sensitivity/expert_bias.yaml"])
    assert frozen <= trained([*paper, registry.TOY_OVERLAY])
    unnamed = registry.load_config([ROOT / registry.CONFIG_FILE], {"include_optional": ["other"]})
    assert not frozen & {t.condition for t in closure(unnamed, "claims").trainings}
