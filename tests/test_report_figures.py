"""Report figures: each data function against independent numpy references, each plot to a valid PNG/PDF.

Two small results trees are built with the project's own writers: planted-community routes,
the base partition and one real retention run (figure 1, heatmaps), a prior with meta.json
(figure 2); and evaluation summaries plus metrics.json files with chosen values (figure 3,
the beta and rho sweeps), so every plotted number can be recomputed here.
"""

from __future__ import annotations

import argparse
import copy
import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.coactivation_reference import naive_coactivation
from tests.conftest import ROOT
from tests.report_files import report_in_sandbox
from workflow_scripts import registry
from workflow_scripts.atomic import write_json
from workflow_scripts.cli import main as cli_main
from workflow_scripts.file_formats.routes import ProbeTokens, Routes, save_routes
from workflow_scripts.layout import routes_path
from workflow_scripts.priors.compute import prior_meta
from workflow_scripts.probe.cli import run_partition, run_retention
from workflow_scripts.probe.routes import routes_meta
from workflow_scripts.registry import BASE, closure
from workflow_scripts.report import figures
from workflow_scripts.report.figures import FIGURES
from workflow_scripts.report.inputs import UndeclaredInputError
from workflow_scripts.report.routing_frames import RETENTION_KEYS, ResultFileError
from workflow_scripts.report.table import ReportInputs
from workflow_scripts.routing_metrics.communities import Detector
from workflow_scripts.routing_metrics.graphs import num_kept_edges
from workflow_scripts.routing_metrics.metrics import community_nmi

N_TOKENS, BLOCKS = 600, 4
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def config() -> dict:
    """The toy registry with the paper's seed grid (``seeds_per_cell`` off): spreads to check."""
    return registry.load_config(registry.shipped_config_files(ROOT, True), {"seeds_per_cell": None})


def _detector(config: dict) -> dict:
    """The detector settings the probe rules pass (rules/common.smk DETECTOR)."""
    detector = config["probe"]["detector"]
    keys = ("name", "resolution", "seed", "tolerance")
    return {**{key: detector[key] for key in keys}, "rho": config["probe"]["edge_fraction"]}


# ------------------------------------------------------------------ routes tree (figure 1, heatmaps)


def _planted_topk(layers: int, experts: int, k: int, noise: float, seed: int) -> np.ndarray:
    """(L, N, k) ascending top-k sets inside one of BLOCKS expert blocks, anywhere with probability noise."""
    rng = np.random.default_rng(seed)
    size = experts // BLOCKS
    out = np.empty((layers, N_TOKENS, k), dtype=np.int16)
    for layer in range(layers):
        relabel = np.roll(np.arange(experts), layer)  # blocks differ per layer
        for t in range(N_TOKENS):
            block = t % BLOCKS
            pool = np.arange(experts) if rng.random() < noise else np.arange(block * size, (block + 1) * size)
            out[layer, t] = np.sort(relabel[rng.choice(pool, size=k, replace=False)])
    return out


def _probe_dir(root: Path, model: str, corpus: str, run: str) -> Path:
    return root / "probes" / model / corpus / run


def _write_routes(root: Path, model: str, corpus: str, run: str, topk: np.ndarray, experts: int) -> Path:
    tokens = ProbeTokens(
        row_ids=np.repeat(np.arange(N_TOKENS // 20), 20).astype(np.int64),
        positions=np.tile(np.arange(20), N_TOKENS // 20).astype(np.int32),
        spans=np.tile(np.r_[np.zeros(8), np.ones(12)], N_TOKENS // 20).astype(np.int8),
    )
    probs = np.full((*topk.shape[:2], experts), 1.0 / experts, dtype=np.float16)
    routes = Routes(topk, probs, np.arange(1, topk.shape[0] + 1, dtype=np.int64))
    folder = _probe_dir(root, model, corpus, run)
    meta = routes_meta(routes, tokens, root / "checkpoint", root / "pool.parquet", N_TOKENS, 64)
    save_routes(folder / "routes.npz", routes, tokens, meta, folder / "meta.json")
    return folder / "routes.npz"


NOISE = {BASE: 0.05, "sft": 0.35, "lbl": 0.6, "rpb": 0.15}


@pytest.fixture(scope="module")
def routes_tree(tmp_path_factory: pytest.TempPathFactory, config: dict) -> Path:
    """Routes of the base and of sft/lbl/rpb s42, the base partition and rpb's real retention metrics."""
    root = tmp_path_factory.mktemp("routes") / "results"
    spec = config["models"]["moonlight"]
    layers, experts, k = spec["moe_layers"], spec["experts"], spec["top_k"]
    paths = {}
    for index, (condition, noise) in enumerate(NOISE.items()):
        run = BASE if condition == BASE else f"{condition}/s42"
        topk = _planted_topk(layers, experts, k, noise, seed=index)
        paths[condition] = _write_routes(root, "moonlight", "math20k", run, topk, experts)
    graphs = root / "graphs" / "moonlight" / "math20k"
    partition = graphs / BASE / "partition.json"
    run_partition(argparse.Namespace(routes=paths[BASE], detector=_detector(config), out=partition))
    probe = copy.deepcopy(config["probe"])
    probe["null_model"]["samples"] = 2
    probe.update(edge_fraction_sweep=[0.1], robustness_detectors=["louvain"], detector_seeds=[0])
    retention = argparse.Namespace(
        routes=paths["rpb"],
        base_routes=paths[BASE],
        partition=partition,
        detector=_detector(config),
        probe=probe,
        out=graphs / "rpb" / "s42" / "metrics.json",
        layers=graphs / "rpb" / "s42" / "layers.parquet",
    )
    run_retention(retention)
    return root


def _load_topk(root: Path, run: str, layer: int) -> np.ndarray:
    with np.load(_probe_dir(root, "moonlight", "math20k", run) / "routes.npz") as data:
        return data["topk"][layer].astype(np.int64)


def _matrix(rows: pd.DataFrame, shape: tuple[int, int]) -> np.ndarray:
    """The array behind figure 1's (i, j, value) rows."""
    matrix = np.full(shape, np.nan)
    matrix[rows["i"].astype(int), rows["j"].astype(int)] = rows["value"]
    assert not np.isnan(matrix).any()
    return matrix


def test_figure_layer_is_the_middle_moe_layer():
    assert [figures.figure_layer(n) for n in (1, 3, 26, 48)] == [0, 1, 13, 24]
    with pytest.raises(ValueError, match="at least one MoE layer"):
        figures.figure_layer(0)


def test_community_order_and_layout_group_communities():
    labels = np.array([2, 0, 1, 0, 2, 1, 0])
    order = figures.community_order(labels)
    assert order.tolist() == [1, 3, 6, 2, 5, 0, 4]
    xy = figures.community_layout(labels)
    assert np.allclose(np.hypot(xy[:, 0], xy[:, 1]), 1.0)
    angles = np.unwrap(np.arctan2(xy[order, 1], xy[order, 0]))
    steps = -np.diff(angles)  # clockwise, one slot per expert plus one empty slot between communities
    slot = 2 * np.pi / (labels.size + 3)
    assert np.allclose(steps, [slot, slot, 2 * slot, slot, 2 * slot, slot])


def test_match_communities_recovers_a_renumbered_partition():
    reference = np.array([0, 0, 1, 1, 2, 2])
    assert figures.match_communities(np.array([5, 5, 3, 3, 9, 9]), reference).tolist() == reference.tolist()
    split = figures.match_communities(np.array([0, 0, 1, 2, 3, 3]), reference)
    assert split.tolist() == [0, 0, 1, 3, 2, 2]  # the unmatched piece is numbered after the reference
    assert community_nmi(split, reference) == pytest.approx(
        community_nmi(np.array([0, 0, 1, 2, 3, 3]), reference)
    )


def test_figure1_data_matches_the_probe_and_retention_outputs(config, routes_tree, monkeypatch):
    def no_detection(*_):
        raise AssertionError("figure 1 ran community detection: retention already did")

    monkeypatch.setattr(Detector, "detect", no_detection)
    data = figures.figure1_data(ReportInputs.at(config, "figure1", routes_tree))
    spec = config["models"]["moonlight"]
    experts, layer = spec["experts"], figures.figure_layer(spec["moe_layers"])
    assert set(data["layer"]) == {layer} and set(data["moe_layer"]) == {layer + 1}
    base, run = data[data["condition"] == BASE], data[data["condition"] == "rpb"]
    topk = _load_topk(routes_tree, BASE, layer)
    selection = _matrix(base[base["part"] == "selection"], (figures.SELECTION_TOKENS, experts))
    for t, row in enumerate(selection):
        assert np.flatnonzero(row).tolist() == sorted(topk[t].tolist())
    assert len(base[base["part"] == "coactivation"]) == experts * experts
    w = _matrix(base[base["part"] == "coactivation"], (experts, experts))
    assert np.allclose(w, naive_coactivation(topk, experts))
    edges = base[base["part"] == "edge"]
    assert len(edges) == num_kept_edges(experts, config["probe"]["edge_fraction"])
    iu = np.triu_indices(experts, k=1)
    assert edges["value"].min() >= np.sort(w[iu])[::-1][len(edges) - 1]  # the heaviest pairs are kept
    partition = json.loads((routes_tree / "graphs/moonlight/math20k/base/partition.json").read_text())
    nodes = base[base["part"] == "node"].sort_values("i")
    assert nodes["community"].tolist() == partition["labels"][layer]
    layers = pd.read_parquet(routes_tree / "graphs/moonlight/math20k/rpb/s42/layers.parquet")
    retained = layers[layers["layer"] == layer].iloc[0]
    nmi = float(run.loc[run["part"] == "nmi", "value"].iloc[0])
    assert nmi == float(retained["nmi"])  # retention's number, not a second computation
    run_nodes = run[run["part"] == "node"].sort_values("i")
    renumbered = figures.match_communities(np.asarray(retained["labels"]), nodes["community"].to_numpy())
    assert run_nodes["community"].tolist() == renumbered.tolist()
    assert community_nmi(run_nodes["community"].to_numpy(), nodes["community"].to_numpy()) == pytest.approx(
        nmi
    )
    assert np.allclose(run_nodes[["x", "y"]], nodes[["x", "y"]])  # both graphs on the base layout


def test_heatmaps_order_experts_by_base_community(config, routes_tree):
    data = figures.coactivation_heatmaps_data(ReportInputs.at(config, "coactivation_heatmaps", routes_tree))
    spec = config["models"]["moonlight"]
    experts, layer = spec["experts"], figures.figure_layer(spec["moe_layers"])
    assert list(dict.fromkeys(data["condition"])) == [BASE, "sft", "lbl", "rpb"]
    partition = json.loads((routes_tree / "graphs/moonlight/math20k/base/partition.json").read_text())
    labels = np.asarray(partition["labels"][layer])
    for condition, rows in data.groupby("condition"):
        assert len(rows) == experts * experts
        diagonal = rows[rows["row"] == rows["col"]].sort_values("row")
        order = diagonal["expert_i"].to_numpy()
        assert sorted(order.tolist()) == list(range(experts))
        assert np.all(np.diff(labels[order]) >= 0)  # communities are contiguous blocks
        assert diagonal["community_i"].tolist() == labels[order].tolist()
        run = BASE if condition == BASE else f"{condition}/s42"
        w = naive_coactivation(_load_topk(routes_tree, run, layer), experts)
        matrix = np.zeros((experts, experts))
        matrix[rows["row"], rows["col"]] = rows["weight"]
        assert np.allclose(matrix, w[np.ix_(order, order)])


def test_figure1_rejects_a_partition_without_labels(config, routes_tree, tmp_path):
    root = tmp_path / "results"
    source = routes_tree / "probes/moonlight/math20k/base"
    target = root / "probes/moonlight/math20k/base"
    target.mkdir(parents=True)
    (target / "routes.npz").write_bytes((source / "routes.npz").read_bytes())
    write_json(root / "graphs/moonlight/math20k/base/partition.json", {"detector": _detector(config)})
    with pytest.raises(ResultFileError, match=r"partition\.json: missing key 'labels'"):
        figures.figure1_data(ReportInputs.at(config, "figure1", root))


# ------------------------------------------------------------------ prior (figure 2)

CLIP_EPS, CLIP_C = 0.05, 5.0


def _write_prior(root: Path, counts: np.ndarray, prior: np.ndarray) -> None:
    folder = root / "priors" / "moonlight" / "math20k"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "prior.npy", prior)
    result = {
        "shape": list(prior.shape),
        "moe_layers": list(range(1, prior.shape[2] + 1)),
        "num_experts": prior.shape[3],
        "token_counts": counts,
    }
    row_ids = [100 + i for i in range(prior.shape[0])]
    meta = prior_meta(
        result,
        row_ids,
        root / "split",
        root / "model",
        chat_template=None,
        max_length=64,
        batch_size=8,
        clip_eps=CLIP_EPS,
        clip_c=CLIP_C,
    )
    write_json(folder / "meta.json", meta)


@pytest.fixture(scope="module")
def prior_tree(tmp_path_factory: pytest.TempPathFactory, config: dict) -> Path:
    """A 4-row prior whose row 0 has an empty Q span; rows hold entries below eps/E and above C/E."""
    root = tmp_path_factory.mktemp("prior") / "results"
    spec = config["models"]["moonlight"]
    rng = np.random.default_rng(3)
    prior = rng.dirichlet(np.full(spec["experts"], 0.3), size=(4, 2, spec["moe_layers"])).astype(np.float32)
    prior[0, 0] = 1.0 / spec["experts"]  # the empty-span fill
    counts = np.array([[0, 30], [12, 40], [5, 9], [7, 0]])
    _write_prior(root, counts, prior)
    return root


def test_figure2_bias_is_the_zero_mean_clipped_log_prior(config, prior_tree):
    data = figures.figure2_data(ReportInputs.at(config, "figure2", prior_tree))
    prior = np.load(prior_tree / "priors/moonlight/math20k/prior.npy")
    experts, layer = prior.shape[-1], figures.figure_layer(prior.shape[2])
    assert set(data["row_id"]) == {101}  # row 0 has an empty Q span
    assert data.groupby("span")["tokens"].first().to_dict() == {"Q": 12, "A": 40}
    lower, upper = CLIP_EPS / experts, CLIP_C / experts
    clamped_total = 0
    for s, span in enumerate(("Q", "A")):
        rows = data[data["span"] == span].sort_values("expert")
        pi = prior[1, s, layer].astype(np.float64)
        assert np.allclose(rows["prior"], pi)
        c = np.minimum(np.maximum(pi, lower), upper)
        c = c / c.sum()
        reference = np.log(c) - np.log(c).mean()
        assert np.allclose(rows["bias"], reference, atol=1e-5)
        assert abs(rows["bias"].mean()) < 1e-6
        low, high = pi <= lower, pi >= upper
        clamped_total += int(low.sum() + high.sum())
        assert np.allclose(rows["bias"][low], rows["bias_lower"][low], atol=1e-5)
        assert np.allclose(rows["bias"][high], rows["bias_upper"][high], atol=1e-5)
        assert np.all(
            (rows["bias"] >= rows["bias_lower"] - 1e-5) & (rows["bias"] <= rows["bias_upper"] + 1e-5)
        )
        assert np.allclose(rows[["prior_lower", "prior_upper"]], [lower, upper])
    assert clamped_total > 0  # the sample exercises the clamp


def test_figure2_needs_a_sample_with_both_spans(config, tmp_path):
    root = tmp_path / "results"
    prior = np.full((2, 2, 3, 16), 1 / 16, dtype=np.float32)
    _write_prior(root, np.array([[0, 4], [3, 0]]), prior)
    with pytest.raises(ResultFileError, match=r"meta\.json: key 'token_counts'"):
        figures.figure2_data(ReportInputs.at(config, "figure2", root))


# ------------------------------------------------------------------ evaluation and metrics (figure 3, sweeps)


def _score(model: str, corpus: str, condition: str, seed: int, benchmark: str) -> float:
    """A deterministic avg@5 score in percent for one run and benchmark."""
    key = f"{model}/{corpus}/{condition}/{seed}/{benchmark}"
    return float(np.random.default_rng(zlib.crc32(key.encode())).uniform(5, 80))


def _nmi(
    corpus: str, condition: str, seed: int, rho: float = 0.1, detector: str = "louvain", dseed: int = 0
) -> float:
    key = f"{corpus}/{condition}/{seed}/{rho}/{detector}/{dseed}"
    return float(np.random.default_rng(zlib.crc32(key.encode())).uniform(0.3, 0.9))


def _write_summary(root: Path, config: dict, evaluation) -> None:
    benchmarks = {}
    for name in config["benchmarks"]:
        score = _score(evaluation.model, evaluation.corpus, evaluation.condition, evaluation.seed, name)
        repeats = [score - 1.0, score - 0.5, score, score + 0.5, score + 1.0]
        benchmarks[name] = {
            "score": score,
            "repeat_scores": repeats,
            "repeat_sd": float(np.std(repeats, ddof=1)),
            "items": 10,
        }
    folder = (
        root / "evals" / evaluation.model / evaluation.corpus / evaluation.condition / f"s{evaluation.seed}"
    )
    write_json(folder / "summary.json", {**evaluation.__dict__, "repeats": 5, "benchmarks": benchmarks})


def _write_metrics(root: Path, config: dict, probe) -> None:
    probes = config["probe"]
    summary = {key: 0.5 for key in RETENTION_KEYS.values()}
    summary["nmi"] = _nmi(probe.corpus, probe.condition, probe.seed)
    sweep = [
        {
            "detector": detector,
            "rho": rho,
            "seed": dseed,
            "nmi": _nmi(probe.corpus, probe.condition, probe.seed, rho, detector, dseed),
        }
        for detector in probes["robustness_detectors"]
        for rho in probes["edge_fraction_sweep"]
        for dseed in probes["detector_seeds"]
    ]
    folder = root / "graphs" / probe.model / probe.corpus / probe.condition / f"s{probe.seed}"
    write_json(folder / "metrics.json", {"summary": summary, "null_model": {}, "sweep": sweep})


@pytest.fixture(scope="module")
def results_tree(tmp_path_factory: pytest.TempPathFactory, config: dict) -> Path:
    """summary.json of every evaluation and metrics.json of every probe of figure 3 and the two sweeps."""
    root = tmp_path_factory.mktemp("evals") / "results"
    for figure_id in ("figure3", "beta_sweep", "rho_sensitivity"):
        needed = closure(config, figure_id)
        for evaluation in needed.evaluations:
            _write_summary(root, config, evaluation)
        for probe in needed.probes:
            if probe.condition != BASE:
                _write_metrics(root, config, probe)
    return root


def _overall9(config: dict, corpus: str, condition: str, seed: int) -> float:
    nine = [name for name, spec in config["benchmarks"].items() if spec["overall9"]]
    assert len(nine) == 9
    return float(np.mean([_score("moonlight", corpus, condition, seed, name) for name in nine]))


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def test_figure3_cells_hold_seed_means_and_sds(config, results_tree):
    data = figures.figure3_data(ReportInputs.at(config, "figure3", results_tree))
    expected_cells = {
        "rpb": ("soft", "global"),
        "within_soft": ("soft", "within"),
        "within_hard": ("hard", "within"),
        "global_hard": ("hard", "global"),
    }
    assert len(data) == 8
    for _, row in data.iterrows():
        assert (row["enforcement"], row["scope"]) == expected_cells[row["condition"]]
        probe_seeds = [42, 43, 44] if row["condition"] == "rpb" else [42, 43]
        overall = [_overall9(config, row["corpus"], row["condition"], s) for s in (42, 43, 44)]
        nmi = [_nmi(row["corpus"], row["condition"], s) for s in probe_seeds]
        assert (row["overall9"], row["overall9_sd"]) == pytest.approx(_mean_sd(overall))
        assert (row["nmi"], row["nmi_sd"]) == pytest.approx(_mean_sd(nmi))
        assert (row["overall9_n"], row["nmi_n"]) == (3, len(probe_seeds))
    assert list(data["condition"][:4]) == ["rpb", "within_soft", "within_hard", "global_hard"]
    assert list(data["corpus"]) == ["math20k"] * 4 + ["coding20k"] * 4  # the figure's corpus order


def test_beta_sweep_places_conditions_on_the_beta_axis(config, results_tree):
    data = figures.beta_sweep_data(ReportInputs.at(config, "beta_sweep", results_tree))
    assert len(data) == 14
    sweep = ("rpb_beta050", "rpb_beta075", "rpb")
    toy = {name: config["conditions"][name]["params"]["beta"] for name in sweep}
    assert toy["rpb_beta050"] < toy["rpb_beta075"] < toy["rpb"]  # the toy calibration keeps the order
    betas = {"sft": 0.0, "sft_frozen_bias": 0.0, **toy, "rpb_selection_only": toy["rpb"]}
    variants = {
        "sft_frozen_bias": "expert_bias_update_rate=0",
        "rpb_selection_only": "bias_in_gate_weights=false",
    }
    for _, row in data.iterrows():
        if row["condition"] == "rpb_hard":
            assert row["hard"] and np.isnan(row["beta"])
        else:
            assert not row["hard"] and row["beta"] == betas[row["condition"]]
        assert row["variant"] == variants.get(row["condition"], "")
        assert row["overall9"] == pytest.approx(_overall9(config, row["corpus"], row["condition"], 42))
        assert row["nmi"] == pytest.approx(_nmi(row["corpus"], row["condition"], 42))
        assert np.isnan(row["overall9_sd"]) and row["nmi_n"] == 1


def test_design_and_beta_reject_conditions_off_their_axis(config):
    with pytest.raises(ValueError, match="conditions.sft: .* no design cell"):
        figures.design_cell(config, "sft")
    with pytest.raises(ValueError, match="conditions.lbl: .* has no beta"):
        figures.condition_beta(config, "lbl")


def test_rho_sensitivity_marks_the_main_detector(config, results_tree):
    data = figures.rho_sensitivity_data(ReportInputs.at(config, "rho_sensitivity", results_tree))
    probe = config["probe"]
    per_run = (
        len(probe["robustness_detectors"]) * len(probe["edge_fraction_sweep"]) * len(probe["detector_seeds"])
    )
    assert len(data) == 2 * 4 * per_run
    main = data[data["main"]]
    assert len(main) == 2 * 4 * len(probe["edge_fraction_sweep"])
    assert set(main["detector"]) == {probe["detector"]["name"]}
    assert set(main["detector_seed"]) == {probe["detector"]["seed"]}
    for _, row in main.iterrows():
        assert row["nmi"] == pytest.approx(_nmi(row["corpus"], row["condition"], 42, row["rho"]))
    assert list(dict.fromkeys(data["condition"])) == ["sft", "lbl", "rpb", "router_l2"]


def test_rho_sensitivity_needs_the_main_detector_in_the_sweep(config, results_tree):
    other = copy.deepcopy(config)
    other["probe"]["detector"]["seed"] = 7
    with pytest.raises(ResultFileError, match="no sweep rows of detector 'louvain' seed 7"):
        figures.rho_sensitivity_data(ReportInputs.at(other, "rho_sensitivity", results_tree))


# ------------------------------------------------------------------ plots


def _tree(request: pytest.FixtureRequest, figure_id: str) -> Path:
    """The fixture results tree a figure is built from."""
    trees = {"figure2": "prior_tree", "figure1": "routes_tree", "coactivation_heatmaps": "routes_tree"}
    return request.getfixturevalue(trees.get(figure_id, "results_tree"))


@pytest.mark.slow
@pytest.mark.parametrize("figure_id", sorted(FIGURES))
def test_plots_render_from_the_data_and_from_its_csv(figure_id, config, request, tmp_path):
    root = _tree(request, figure_id)
    compute, plot = FIGURES[figure_id]
    data = compute(ReportInputs.at(config, figure_id, root))
    csv = tmp_path / f"{figure_id}.csv"
    data.to_csv(csv, index=False, float_format="%.6g")
    plot(data).savefig(tmp_path / f"{figure_id}-frame.png", dpi=60)
    figure = plot(pd.read_csv(csv))
    figure.savefig(tmp_path / f"{figure_id}.png", dpi=80)
    figure.savefig(tmp_path / f"{figure_id}.pdf")
    png, pdf = (tmp_path / f"{figure_id}.png").read_bytes(), (tmp_path / f"{figure_id}.pdf").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 5000
    assert pdf.startswith(b"%PDF") and b"%%EOF" in pdf[-64:]
    assert figure.get_suptitle()


@pytest.mark.slow
@pytest.mark.parametrize("figure_id", sorted(FIGURES))
def test_figure_builds_from_its_declared_inputs_alone_and_plots_from_its_csv(
    figure_id, config, request, tmp_path
):
    root = _tree(request, figure_id)
    csv = report_in_sandbox(config, figure_id, root, tmp_path)
    compute, _ = FIGURES[figure_id]
    expected = compute(ReportInputs.at(config, figure_id, root)).to_csv(index=False, float_format="%.6g")
    assert csv.read_text() == expected
    png, pdf = tmp_path / "plot.png", tmp_path / "plot.pdf"
    argv = [
        "report",
        "figure-plot",
        "--id",
        figure_id,
        "--data",
        str(csv),
        "--png",
        str(png),
        "--pdf",
        str(pdf),
    ]
    assert cli_main(argv) == 0
    assert png.read_bytes().startswith(PNG_SIGNATURE) and pdf.read_bytes().startswith(b"%PDF")


def test_an_undeclared_input_is_refused(config, routes_tree):
    inputs = ReportInputs.at(config, "figure3", routes_tree)  # figure 3 reads no routes file
    with pytest.raises(UndeclaredInputError, match=r"routes\.npz: not a declared input"):
        inputs.results.path(routes_path, next(iter(closure(config, "figure1").probes)))


def test_plot_rejects_data_without_its_columns():
    with pytest.raises(ValueError, match=r"figure3: data lacks columns \[.*'enforcement'"):
        figures.figure3_plot(pd.DataFrame({"model": ["m"], "corpus": ["c"], "condition": ["rpb"]}))
    with pytest.raises(ValueError, match="beta_sweep: no data to plot"):
        figures.beta_sweep_plot(
            pd.DataFrame(
                columns=[
                    "model",
                    "corpus",
                    "condition",
                    "label",
                    "beta",
                    "hard",
                    "variant",
                    "nmi",
                    "overall9",
                ]
            )
        )
