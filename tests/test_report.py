"""The tuning report: one offline HTML page, sections driven by their data, a terminal heatmap.

The tables here are synthetic but shaped like real ones: every kernel of the real
avx512 / avx2 / generic families (autotune.specs), GFLOPS from a seeded roofline-ish
model, a measurement frame over K x pad, and a few rejected kernels.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from autotune import families, table
from autotune.families import x86
from autotune.host import CacheLevel, HostInfo
from autotune.reports import ReportExtras, render_report, report_command, terminal_heatmap, write_report
from autotune.reports import data
from autotune.plans import Plan, Step
from autotune.specs import KernelSpec
from autotune.table import KernelRecord, TunedTable

HOST = HostInfo(arch="x86_64", os="linux", cpu="Synthetic Xeon (AVX-512)",
                features=("avx2", "avx512bw", "avx512dq", "avx512f", "avx512vl", "fma"),
                caches=(CacheLevel(1, "data", 49152, 64, 12, 64), CacheLevel(2, "unified", 2097152, 64, 16, 2048)),
                cores=2, compiler="gcc 12.2.0")
PEAK_BY_ISA = {"avx512": {"f32": 152.4, "f64": 76.2}, "avx2": {"f32": 85.8, "f64": 42.9},
               "generic": {"f32": 9.5, "f64": 9.5}}
KS = (16, 64, 256)
PADS = (0, 17)


def synthetic_table(provenance: str = "measured", isas: tuple[str, ...] = ("avx512", "avx2", "generic"),
                    seed: int = 7, tuning: dict | None = None) -> TunedTable:
    rng = np.random.default_rng(seed)
    records, rows = [], []
    for spec in families.default_family(isas):
        name = spec.name
        if rng.random() < 0.01:
            reason = rng.choice(["wrong result at K=17 (lda=21, alpha=1, beta=0): max rel err 3.1e-02",
                                 "crashed (SIGSEGV) during validation"])
            records.append(KernelRecord(spec, "rejected", reason=str(reason)))
            continue
        if provenance == "emulated":
            records.append(KernelRecord(spec, "validated"))
            continue
        # Efficiency grows with the accumulator count (FMA latency hidden) and with the
        # block's compute-to-load ratio; noise stands in for the machine.
        acc = x86.register_budget(spec).accumulators
        intensity = spec.mr * spec.nr / (spec.mr + spec.nr)
        eff = min(1.0, acc / x86.FMA_CHAINS) * (1 - math.exp(-intensity / 2.2)) * rng.uniform(0.85, 0.98)
        peak = PEAK_BY_ISA[spec.isa][spec.dtype]
        for k in KS:
            depth = 1 - math.exp(-k / 24)  # call overhead dominates shallow K
            for pad in PADS:
                median = peak * eff * depth * (0.93 if pad else 1.0)
                best = median * rng.uniform(1.0, 1.04)
                ns = 2 * spec.mr * spec.nr * k / median
                rows.append([name, k, pad, spec.mr + pad, k + pad, spec.mr + pad, best, median, ns])
        frame = pd.DataFrame(rows[-len(KS) * len(PADS):], columns=table.MEASUREMENT_COLUMNS)
        tight = frame[frame["pad"] == 0]
        records.append(KernelRecord(spec, "validated", object_hash="0" * 64,
                                    best_gflops=float(frame["best_gflops"].max()),
                                    gflops_by_k=tuple((int(k), float(g)) for k, g in
                                                      zip(tight["K"], tight["median_gflops"]))))
    measurements = pd.DataFrame(rows, columns=table.MEASUREMENT_COLUMNS)
    peaks = {} if provenance == "emulated" else {"f32": 152.4, "f64": 76.2}
    settings = {"mode": "default", "ks": list(KS), "pads": list(PADS), "min_time_ms": 2.0, "repeats": 5,
                "isas": list(isas), "peak_by_isa": {} if provenance == "emulated" else
                {isa: PEAK_BY_ISA[isa] for isa in isas}}
    return TunedTable(target="host" if provenance != "emulated" else "sme2", host=HOST, provenance=provenance,
                      peak_gflops=peaks, kernels=tuple(records), measurements=measurements,
                      selection=table.select_kernels(records), settings=settings, tuning=tuning,
                      params={"blk_k": 256, "pack_threshold": 96})


def synthetic_tuning(seed: int = 3, trials: int = 40) -> dict:
    """Trials where blk_k has an optimum (fANOVA should see it), nb a weak trend, and
    the unroll preference no effect at all."""
    rng = np.random.default_rng(seed)
    out = []
    for number in range(trials):
        blk_k = int(rng.choice([64, 128, 192, 256, 384, 512]))
        nb = int(rng.integers(4, 65))
        prefer = str(rng.choice(["u2", "u4"]))
        value = 1e-3 * (1 + 0.8 * abs(math.log2(blk_k / 256)) + 0.002 * nb + rng.normal(0, 0.02))
        out.append({"number": number, "value": value, "params": {"blk_k": blk_k, "nb": nb, "prefer": prefer}})
    out.append({"number": trials, "value": None, "params": {"blk_k": 64, "nb": 8, "prefer": "u2"}})  # failed
    return {"trials": out, "objective_default_s": 1.6e-3, "objective_tuned_s": 1.02e-3, "budget_s": 120,
            "kept": True}


def tiled_plan(M: int, N: int, K: int, blocks: list[tuple[int, int]]) -> Plan:
    """Cover C greedily with the first block that fits: the shape of a real tiler's output."""
    steps = []
    i = 0
    while i < M:
        mb = next(m for m, _ in blocks if m <= M - i)
        j = 0
        while j < N:
            nb = next(n for m, n in blocks if m == mb and n <= N - j)
            steps.append(Step(f"at_sgemm_avx512_nn_{mb}x{nb}_u4", i, j, mb, nb, False, False, 0))
            j += nb
        i += mb
    return Plan("f32", "nn", "col", M, N, K, M, K, M, "small", 1, "nn", (0, 0, 0),
                predicted_seconds=2 * M * N * K / 140e9, memops=0.0, steps=tuple(steps))


EXAMPLE_BLOCKS = [(m, n) for m in (32, 16, 8, 4, 2, 1) for n in (12, 6, 4, 2, 1)]


def example_plans() -> list[Plan]:
    return [tiled_plan(70, 45, 64, EXAMPLE_BLOCKS), tiled_plan(20, 20, 20, EXAMPLE_BLOCKS)]


def example_benchmarks() -> pd.DataFrame:
    rows = []
    for n, (ours, blas, numpy_) in {8: (40.0, 12.0, 3.0), 16: (95.0, 45.0, 14.0),
                                    32: (128.0, 96.0, 60.0), 64: (140.0, 131.0, 120.0)}.items():
        for library, gflops in (("autotune", ours), ("openblas", blas), ("numpy", numpy_)):
            rows.append({"shape": f"{n}x{n}x{n}", "library": library, "gflops": gflops, "ratio": ours / gflops})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def measured() -> TunedTable:
    return synthetic_table()


@pytest.fixture(scope="module")
def full_extras() -> ReportExtras:
    return ReportExtras(tuning=synthetic_tuning(), plans=example_plans(), benchmarks=example_benchmarks())


@pytest.fixture(scope="module")
def small() -> TunedTable:
    """One ISA only: for the tests that need a page, not every family (rendering costs seconds)."""
    return synthetic_table(isas=("avx2",))


@pytest.fixture(scope="module")
def full_report(measured, full_extras, tmp_path_factory) -> Path:
    return write_report(measured, tmp_path_factory.mktemp("report") / "out" / "report.html", extra=full_extras)


@pytest.fixture(scope="module")
def full_page(full_report) -> str:
    return full_report.read_text()


# -- the page ------------------------------------------------------------------

def assert_offline(page: str) -> None:
    # Base64 payloads may spell anything ("http" included): check the markup around them.
    page = re.sub(r'"data:image/png;base64,[A-Za-z0-9+/=]*"', '"data:"', page)
    assert "http" not in page.lower()
    assert not re.search(r'(src|href)="(?!data:|#)', page), "a reference leaves the page"
    assert "<link" not in page and "<script" not in page
    assert "@import" not in page and "url(" not in re.sub(r"url\(#[\w-]+\)", "", page)


def test_page_is_one_offline_file(full_report, full_page):
    assert full_report.name == "report.html" and full_report.parent.name == "out"
    assert [p.name for p in full_report.parent.iterdir()] == ["report.html"]  # no temp file left beside it
    assert_offline(full_page)
    assert full_page.startswith("<!DOCTYPE html>")


def test_every_section_appears_when_its_data_exists(full_page):
    for anchor in ("summary", "families", "heatmaps", "depth", "selection", "rejected", "tuning", "plans", "peers"):
        assert f'<section id="{anchor}">' in full_page
        assert f'href="#{anchor}"' in full_page
    assert full_page.count('<figure class="heatmap">') == 2  # f32, f64
    assert full_page.count('<img class="key"') == 2  # one colour key per dtype
    # One panel per family (3 ISAs x 4 transpositions per dtype), each drawn at its own size.
    assert full_page.count('alt="avx512 f32 nn: heatmap') == 1
    assert len(re.findall(r'alt="\w+ f(32|64) (nn|nt|tn|tt): heatmap', full_page)) == 24
    assert full_page.count('<figure class="kcurve">') == 2
    assert full_page.count('<figure class="plan">') == 2
    assert 'aria-label="objective per trial"' in full_page
    assert 'aria-label="parameter importance"' in full_page
    assert 'aria-label="peer comparison"' in full_page
    assert "emulated-banner" not in full_page


def test_later_stage_sections_are_absent_without_their_data(small):
    page = render_report(small)
    for anchor in ("tuning", "plans"):
        assert f'id="{anchor}"' not in page
        assert f'href="#{anchor}"' not in page
    assert "figure-svg" in page  # the GFLOPS-against-K charts are still there


def test_without_peer_benchmarks_the_page_says_how_to_get_them(small, full_page):
    page = render_report(small)
    assert 'href="#peers"' in page
    note = page[page.index('id="no-peers"'):]
    note = re.sub(r"\s+", " ", note[:note.index("</p>")])
    assert "No peer benchmarks yet: run <code>autotune bench</code>" in note
    assert 'id="no-peers"' not in full_page and 'aria-label="peer comparison"' in full_page


def test_svg_ids_are_unique_across_the_page(full_page):
    ids = re.findall(r'\bid="([^"]+)"', full_page)
    assert len(ids) == len(set(ids))
    for ref in set(re.findall(r'href="#([^"]+)"', full_page)):
        assert ref in ids, f"dangling reference #{ref}"


def test_numbers_that_matter_are_in_tables(measured, full_page):
    fastest = max(measured.validated, key=lambda r: r.best_gflops or 0)
    assert fastest.name in full_page
    assert f"{fastest.best_gflops:,.1f}" in full_page
    for record in measured.rejected:
        assert record.name in full_page
    assert "wrong result at K=17" in full_page
    assert "152.4" in full_page and "85.8" in full_page  # host peak and the avx2 peak
    assert "Synthetic Xeon" in full_page


def test_emulated_table_says_so_prominently(tmp_path):
    emulated = synthetic_table("emulated", isas=("avx2",))
    page = write_report(emulated, tmp_path / "sme2.html").read_text()
    assert_offline(page)
    banner = page.index('id="emulated-banner"')
    assert banner < page.index('<section id="summary">')  # above everything else
    assert "EMULATED" in page[banner:banner + 300]
    assert 'id="depth"' not in page  # no timings, no speed charts
    assert '<figure class="heatmap">' in page  # the validation map still is
    assert "cross-compiled" in page[banner:banner + 400]


def test_native_install_under_an_emulator_is_not_called_cross_compiled(tmp_path):
    emulated = synthetic_table("emulated", isas=("avx2",))
    inside = "aarch64 emulated by QEMU -cpu cortex-a76 on the host's x86_64 kernel"
    native = dataclasses.replace(emulated, host=dataclasses.replace(emulated.host, emulator=inside))
    page = write_report(native, tmp_path / "host.html").read_text()
    banner = page[page.index('id="emulated-banner"'):][:600]
    assert "natively inside an emulated machine" in banner and "cortex-a76" in banner
    assert "cross-compiled" not in banner


def test_modelled_table_where_everything_was_rejected_still_renders():
    spec = KernelSpec("avx2", "f64", 4, 3, unroll=4)
    broken = TunedTable(target="host", host=HOST, provenance="model", peak_gflops={"f64": 42.9},
                        kernels=(KernelRecord(spec, "rejected", reason="compile error: bad asm"),))
    page = render_report(broken)
    assert_offline(page)
    assert 'id="model-banner"' in page and "emulated-banner" not in page
    assert "compile error: bad asm" in page and "No kernel is selected" in page
    assert 'id="depth"' not in page


def test_bad_benchmark_frame_is_refused(small):
    with pytest.raises(ValueError, match="columns"):
        render_report(small, extra=ReportExtras(benchmarks=pd.DataFrame({"shape": ["8x8x8"]})))


def test_report_command_writes_under_home(small, tmp_path, monkeypatch):
    monkeypatch.setattr("autotune.host.detect", lambda: HOST)
    table.save(small, tmp_path)
    path = report_command("host", None, False, root=tmp_path)
    assert path == tmp_path / "reports" / "host.html"
    assert 'id="heatmaps"' in path.read_text()
    other = HostInfo(arch="x86_64", os="linux", cpu="Other", features=(), cores=1)
    monkeypatch.setattr("autotune.host.detect", lambda: other)
    with pytest.raises(table.TableError, match="another host"):
        report_command("host", tmp_path / "x.html", False, root=tmp_path)


# -- the numbers behind the figures --------------------------------------------

def test_heatmap_grid_matches_the_records(measured):
    grid = data.heatmap_grid(measured, "avx512", "f32", "nn")
    # The heatmap is the strategy's family; variants (the gather blocks) are not drawn.
    family = [s for s in families.default_family(["avx512"], ["f32"], ["nn"]) if not s.variant]
    assert len(grid.mrs) == len({s.mr for s in family}) and len(grid.nrs) == len({s.nr for s in family})
    assert (grid.status != data.ABSENT).sum() == len(family)
    for record in measured.kernels:
        s = record.spec
        if (s.isa, s.dtype, s.trans) != ("avx512", "f32", "nn") or s.variant:
            continue
        i, j = grid.mrs.index(s.mr), grid.nrs.index(s.nr)
        if record.validated:
            assert grid.gflops[i, j] == pytest.approx(record.best_gflops)
            assert grid.percent[i, j] == pytest.approx(100 * record.best_gflops / 152.4)
        else:
            assert grid.status[i, j] == data.REJECTED and math.isnan(grid.gflops[i, j])
        assert grid.selected[i, j] == (record.name in measured.selection)


def test_k_curves_follow_the_selection_score(measured):
    curves = data.k_curves(measured, "avx2", "f64", "nt", top=3)
    assert curves["kernel"].nunique() == 3
    assert sorted(curves["K"].unique()) == list(KS)
    ranked = sorted((r for r in measured.validated if r.spec.isa == "avx2" and r.spec.dtype == "f64"
                     and r.spec.trans == "nt"), key=table.kernel_score, reverse=True)
    assert list(dict.fromkeys(curves["kernel"])) == [r.name for r in ranked[:3]]
    tight = measured.measurements.query("kernel == @ranked[0].name and pad == 0")
    assert curves[curves["kernel"] == ranked[0].name]["gflops"].tolist() == pytest.approx(
        tight.sort_values("K")["median_gflops"].tolist())


def test_pad_sensitivity_sees_the_misalignment_cost(measured):
    pad = data.pad_sensitivity(measured)
    assert len(pad) == 24  # 3 ISAs x 2 dtypes x 4 transpositions
    assert pad["ratio"].between(0.9, 0.96).all()  # the synthetic model charges 7%


def test_importance_finds_the_parameter_that_matters():
    history = data.tuning_history(synthetic_tuning())
    assert len(history.trials) == 40  # the failed trial is dropped
    assert history.speedup == pytest.approx(1.6 / 1.02)
    importance, _ = data.param_importance(history)
    # blk_k has an optimum in the middle, which a rank correlation would miss.
    assert importance.index[0] == "blk_k"
    assert importance["blk_k"] > 0.6
    assert importance["prefer"] < 0.15  # no effect at all: only chance grouping


def test_importance_ignores_parameters_that_never_varied():
    tuning = synthetic_tuning(trials=12)
    for trial in tuning["trials"]:
        trial["params"]["fixed"] = 3
    importance, _ = data.param_importance(data.tuning_history(tuning))
    assert "fixed" not in importance.index and len(importance) == 3


def test_no_tuning_history_without_finished_trials():
    assert data.tuning_history(None) is None
    assert data.tuning_history({"trials": [{"number": 0, "value": None, "params": {}}]}) is None


def test_plan_tells_its_kernels_by_area_and_its_coverage():
    plan = example_plans()[0]
    assert plan.coverage() == pytest.approx(1.0)
    assert plan.kernels_by_area()[0] == "at_sgemm_avx512_nn_32x12_u4"
    halved = dataclasses.replace(plan, steps=plan.steps[: len(plan.steps) // 2])
    assert halved.coverage() < 1.0


# -- the terminal ----------------------------------------------------------------

@pytest.mark.parametrize("isa,dtype,trans", [("avx512", "f32", "nn"), ("avx512", "f32", "tt"),
                                             ("avx512", "f64", "tn"), ("avx2", "f32", "nt"),
                                             ("generic", "f64", "nn")])
def test_terminal_heatmap_fits_80_columns(measured, isa, dtype, trans):
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, color_system="truecolor", force_terminal=True)
    console.print(terminal_heatmap(measured, dtype, trans, isa))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", buffer.getvalue())
    lines = plain.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith(f"{isa} {dtype} {trans}")
    grid = data.heatmap_grid(measured, isa, dtype, trans)
    assert len(lines) == 1 + 1 + max(len(grid.mrs), len(grid.nrs)) + 1  # title, header, rows, legend
    assert "48;2;" in buffer.getvalue()  # cells carry the colour map as backgrounds


def test_terminal_heatmap_without_timings():
    emulated = synthetic_table("emulated", isas=("avx2",))
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=False).print(terminal_heatmap(emulated, "f32", "nn", "avx2"))
    assert "ok" in buffer.getvalue() and "no timings" in buffer.getvalue()


# -- the browser -------------------------------------------------------------------

@pytest.mark.browser
def test_page_renders_in_headless_chromium(full_report, tmp_path):
    from autotune.reports.browser import find_chromium, render

    if not find_chromium():
        pytest.fail("Chromium is not installed: run scripts/setup.sh --test")
    rendering = render(full_report, tmp_path / "report.png", width=1280, height=2400)
    print(f"screenshot: {rendering.screenshot}")  # pytest -s shows where to look
    assert rendering.returncode == 0
    assert rendering.console == (), rendering.console  # the page runs no script, so nothing may log
    assert rendering.errors == ()
    from PIL import Image

    pixels = np.asarray(Image.open(rendering.screenshot).convert("L"), dtype=float)
    assert pixels.shape == (2400, 1280)
    assert pixels.std() > 20  # a blank or single-colour page has almost no variance
    # The heatmaps sit below the summary: the lower half has ink too, not just the header.
    assert pixels[1200:].std() > 20


# -- the tuning section: counts, verdict, parameters, importance -------------------

def states_tuning(kept: bool = False) -> dict:
    """A record as autotune.tune writes it: trials with states, studies with their confirmation runs."""
    trials = []
    for number in range(30):
        state = "PRUNED" if number % 3 == 1 else "FAIL" if number == 29 else "COMPLETE"
        value = 1.0e-3 * (1 + 0.01 * (number % 7)) if state == "COMPLETE" else None
        trials.append({"number": number, "study": "f32-all-large", "state": state, "value": value,
                       "params": {"f32.blk_k": 64 * (1 + number % 4), "f32.grid": number % 3}})
    studies = [{"study": "f32-all-large", "trials": 30, "kept": kept, "best_s": 0.9e-3,
                "confirm_default_s": 1.0e-3, "confirm_best_s": 0.995e-3 if not kept else 0.9e-3}]
    return {"trials": trials, "studies": studies, "kept": kept, "budget_s": 90.0,
            "objective_default_s": 1.0e-3, "objective_tuned_s": 1.0e-3 if not kept else 0.9e-3,
            "default_params": {"blk_k": {"f32": 256, "f64": 256}},
            "tuned_params": {"blk_k": {"f32": 128, "f64": 256}} if kept else None}


def test_trials_are_counted_as_the_command_line_counts_them(small):
    from autotune.cli import print_table
    from autotune.trials import summary_line

    tuning = states_tuning()
    counts = data.tuning_history(tuning).counts
    assert (counts.total, counts.complete, counts.pruned, counts.failed) == (30, 19, 10, 1)
    page = render_report(dataclasses.replace(small, tuning=tuning))
    card = page[page.index('<div class="label">trials</div>'):]
    card = card[:card.index("</div></div>")]
    assert '<div class="value">30</div>' in card
    assert "19 complete, 10 pruned, 1 failed" in card
    assert "30 trials: 19 complete, 10 pruned, 1 failed" in summary_line(tuning)
    buffer = io.StringIO()
    print_table(dataclasses.replace(small, tuning=tuning), Console(file=buffer, width=200))
    assert "30 trials: 19 complete, 10 pruned, 1 failed" in buffer.getvalue()
    # The chart draws the complete ones and says where the others went.
    assert "one of the 19 complete trials" in page and "10 pruned" in page


def test_a_default_kept_says_why_instead_of_one_times_faster(small):
    page = render_report(dataclasses.replace(small, tuning=states_tuning(kept=False)))
    section = page[page.index('<section id="tuning">'):page.index("</section>", page.index('<section id="tuning">'))]
    assert "1.00x faster" not in section
    assert "defaults kept" in section
    verdict = re.sub(r"\s+", " ", section[section.index('id="tuning-verdict"'):])
    assert "only when an interleaved confirmation run shows them faster than the defaults by more than 1%" \
        in verdict
    assert "f32-all-large: best re-measured at 0.995 ms against 1.000 ms for the defaults" in verdict
    kept = render_report(dataclasses.replace(small, tuning=states_tuning(kept=True)))
    assert "1.11x faster than the defaults" in kept and "The tuned parameters were kept" in kept


def test_the_verdict_of_a_real_search(tmp_path):
    from tests.test_tune import FakeRunner, run

    flat = run(tmp_path / "flat", runner=FakeRunner(flat=True), n_trials=6)
    assert "The analytic defaults were kept" in data.tuning_history(flat.record).verdict
    found = run(tmp_path / "found", n_trials=25)
    history = data.tuning_history(found.record)
    assert history.kept and history.verdict.startswith("The tuned parameters were kept")
    assert history.counts.total == len(found.record["trials"])


def test_keep_margin_is_the_tuners():
    from autotune import trials, tune

    assert trials.KEEP_MARGIN == tune.KEEP_MARGIN


def test_planner_parameters_are_a_table_not_a_dict(small):
    from autotune.params import BY_NAME, DEFAULTS

    params = {**DEFAULTS.to_mapping(), "simd_bytes": 64}
    params["blk_k"] = {"f32": 128, "f64": 256}
    page = render_report(dataclasses.replace(small, params=params, tuning=states_tuning(kept=True)))
    table_html = page[page.index('id="params-table"'):]
    table_html = table_html[:table_html.index("</table>")]
    assert "{&#39;f32&#39;" not in page and "{'f32'" not in page
    assert "<th>parameter</th><th>meaning</th><th class=\"num\">f32</th><th class=\"num\">f64</th>" in table_html
    assert BY_NAME["blk_k"].meaning in table_html and BY_NAME["edge_frac"].meaning in table_html
    row = table_html[table_html.index(">blk_k<"):]
    row = row[:row.index("</tr>")]
    assert re.findall(r">([^<>]+)</td>", row)[-3:] == ["128", "256", "256"]
    assert 'class="num tuned">128' in row  # the value the search changed
    assert "2 ns" in table_html  # call_seconds, in a unit a person reads
    assert "simd_bytes" in page[page.index('<section id="params">'):]


def test_importance_is_optunas_and_says_so():
    history = data.tuning_history(synthetic_tuning())
    importance, method = data.param_importance(history)
    assert method == data.OPTUNA_METHOD and "get_param_importances" in method
    assert sum(importance) == pytest.approx(1.0)  # optuna's shares, normalised per study
    short, method = data.param_importance(data.tuning_history(synthetic_tuning(trials=6)))
    assert short.empty and "6 complete trials, fewer than 10" in method


def test_importance_is_per_study():
    tuning = synthetic_tuning()
    for trial in tuning["trials"]:  # two studies searching different parameters
        trial["study"] = "f32-all-large" if trial["number"] % 2 else "f32-all-small"
        trial["params"] = {f"{trial['study'][:3]}.{trial['study'][-5:]}.{k}": v
                           for k, v in trial["params"].items()}
    importance, method = data.param_importance(data.tuning_history(tuning))
    assert method == data.OPTUNA_METHOD and len(importance) == 6
    assert importance.sum() == pytest.approx(2.0)


def test_the_page_names_the_importance_method(full_page, small):
    assert "optuna.importance.get_param_importances" in full_page
    page = render_report(small, extra=ReportExtras(tuning=synthetic_tuning(trials=6)))
    assert "Parameter importance: none to show" in page and "fewer than 10" in page


@pytest.mark.browser
@pytest.mark.parametrize("width", [800, 1280])
def test_page_fits_the_window(full_report, width):
    """Nothing but a table's own scroll box is wider than the window; heatmaps show at full size."""
    from autotune.reports.browser import find_chromium, layout

    if not find_chromium():
        pytest.fail("Chromium is not installed: run scripts/setup.sh --test")
    laid = layout(full_report, width=width)
    assert laid.viewport == width
    assert laid.page_width <= width and laid.overflow == (), laid
    assert laid.heatmap_scale == pytest.approx(1.0, abs=0.01)  # labels as drawn, not shrunk


def test_peer_shapes_without_a_ratio_still_render(small):
    """A shape only autotune ran (its plan interface with no plan peer found) has no ratio."""
    frame = pd.concat([example_benchmarks(), pd.DataFrame(
        [{"shape": "f32 plan 4x4x4", "library": "autotune", "gflops": 6.8, "ratio": math.nan}])])
    page = render_report(small, extra=ReportExtras(benchmarks=frame))
    row = page[page.index('<td class="mono">f32 plan 4x4x4</td>'):]
    assert row[:row.index("</tr>")].count("–") == 3  # no ratio for any library


def test_quantised_kernels_have_their_own_section_measured_or_only_listed(small):
    assert 'id="quantised"' not in render_report(small)
    quant = {"verdicts": {"at_q4s_avx2_4x16": "validated", "at_q4s_avx2_1x8": "wrong answer at 5x100x41"},
             "selected": ["at_q4s_avx2_4x16"],
             "seconds": {"at_q4s_avx2_4x16": {"16": 2.5e-4, "64": 8.75e-4}}}
    page = render_report(dataclasses.replace(small, settings={**small.settings, "quant": quant}))
    section = page[page.index('<section id="quantised">'):]
    section = section[:section.index("</section>")]
    assert 'href="#quantised"' in page and "K = N = 1024" in section
    assert re.search(r'at_q4s_avx2_4x16</td><td>validated</td>\s*<td>&#10003;</td>'
                     r'<td class="num">250</td><td class="num">875</td>', section), section
    assert re.search(r'class="bad">wrong answer at 5x100x41</td>\s*<td></td><td class="num">&ndash;</td>', section)
    assert "{&#39;verdicts" not in page and "{'verdicts" not in page  # not dumped among the settings

    library = [{"name": "at_q4s_i8mm_4x8", "kind": "q4s", "form": "block", "needs": "i8mm"},
               {"name": "at_q4s_sme2_1x4vl", "kind": "q4s", "form": "gemv", "needs": "sme2"}]
    page = render_report(dataclasses.replace(small, settings={**small.settings, "quant_library": library}))
    section = page[page.index('<section id="quantised">'):]
    assert "not measured here" in section
    assert '<td class="mono">at_q4s_sme2_1x4vl</td><td>q4s</td><td>gemv</td><td>sme2</td>' in section
    assert "&#39;needs&#39;" not in page


def test_measured_decisions_have_their_section_with_a_chart_per_crossover(small):
    """Model against measurement for each crossover, the doubted report and the held-out verdict."""
    from dataclasses import replace

    from autotune.crossovers import Crossover, Point
    from autotune.host import CacheLevel

    points = tuple(Point(side, 1.0, ratio, 0.01, 3) for side, ratio in ((128, 1.2), (180, 1.05), (256, 0.8),
                                                                        (360, 0.7)))
    crossovers = [Crossover("pack_flops", "f32", "in place", "packed", 2.0 * 2880 ** 3, 2.0 * 215 ** 3,
                            "measured", points).to_dict(),
                  Crossover("thread_flops", "f32", "1 thread", "all threads", 5e5, 5e5, "busy").to_dict()]
    host = replace(small.host, caches=(CacheLevel(2, "unified", 2 << 20, 64, 16, 2048),
                                       CacheLevel(3, "unified", 480 << 20, 64, 16, 491520, 2)))
    dominated = {"avx2": {"kernels": 35, "sampled": 12, "area_limit": 84, "by": "avx512", "worst_ratio": 0.608}}
    from autotune.crossovers import EdgeSpeed

    edge = {"f64": EdgeSpeed("f64", 3.7, 0.031, 119.0, {"15x15": 3.7}).to_dict()}
    table = replace(small, host=host, settings={**small.settings, "crossovers": crossovers, "dominated": dominated,
                                                "other_load": 0.25, "edge": edge},
                    tuning={**(small.tuning or {}), "held_out": {"chosen": "measured", "times_s": {}, "shapes": 30,
                                                                "gain_over_model": 2.5}})
    page = render_report(table)
    section = page[page.index('<section id="decisions">'):]
    section = section[:section.index("</section>")]
    assert section.count("<svg") == 1  # the busy thread sweep has no points to draw
    assert "480 MiB" in section and "packed from 215^3" in section and "the model said 2880^3" in section
    assert "measured crossovers kept, 2.50x" in section and "quiet machine" in section
    assert "Edge code f64: 3.7 GFLOPS measured, 3.1% of the 119 GFLOPS peak" in section
    # The settings table says what was skipped, and dumps none of these records (it
    # once printed two screens of the crossovers' points).
    settings = page[page.index("<h3>Measurement settings</h3>"):]
    settings = settings[:settings.index("</table>")]
    assert "35 of tiles of 84 elements or more" in settings and "by 39% or more" in settings
    assert "0.25 CPUs" in settings and "&#39;" not in settings and "base_s" not in page
    assert 'id="decisions"' not in render_report(small)
