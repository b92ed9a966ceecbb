"""The one planner-parameter declaration and the C views derived from it agree field by field."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import optuna
import pytest

from autotune import params as P
from autotune.home import kernels_src
from autotune import link as library


def compile_and_run(tmp_path: Path, source: str) -> str:
    c_file, exe = tmp_path / "probe.c", tmp_path / "probe"
    c_file.write_text(source)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{kernels_src() / 'include'}",
                    f"-I{kernels_src() / 'runtime'}", str(c_file), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def test_public_struct_has_the_declared_layout(tmp_path):
    probes = "\n".join(
        f'    printf("{p.name} %zu %zu\\n", offsetof(at_tune_params, {p.name}), '
        f"sizeof(((at_tune_params *)0)->{p.name}));"
        for p in P.PARAMS
    )
    out = compile_and_run(tmp_path, f"""
#include <stddef.h>
#include <stdio.h>
#include "autotune.h"
int main(void)
{{
    printf("sizeof %zu 0\\n", sizeof(at_tune_params));
{probes}
    return 0;
}}
""")
    seen = {name: (int(a), int(b)) for name, a, b in (line.split() for line in out.splitlines())}
    assert seen.pop("sizeof")[0] == ctypes.sizeof(P.CTuneParams)
    for p in P.PARAMS:
        field = getattr(P.CTuneParams, p.name)
        assert seen[p.name] == (field.offset, field.size), p.name


def test_emitted_initialiser_holds_the_declared_values(tmp_path):
    distinct = P.DEFAULTS.with_values("f64", {"blk_m": 96, "edge_frac": 0.125, "grid": 2, "thread_flops": 3e5})
    prints = "\n".join(
        f'    printf("{p.name} %.17g %.17g\\n", (double)v.{p.name}[0], (double)v.{p.name}[1]);' if p.per_dtype
        else f'    printf("{p.name} %.17g %.17g\\n", (double)v.{p.name}, (double)v.{p.name});'
        for p in P.PARAMS
    )
    out = compile_and_run(tmp_path, f"""
#include <stdio.h>
#include "autotune.h"
{P.emit_c("v", distinct)}
int main(void)
{{
{prints}
    return 0;
}}
""")
    got = {name: (float(a), float(b)) for name, a, b in (line.split() for line in out.splitlines())}
    for p in P.PARAMS:
        want = getattr(distinct, p.name)
        assert got[p.name] == (tuple(map(float, want)) if p.per_dtype else (float(want),) * 2), p.name


def test_record_mapping_and_struct_round_trip():
    p = P.DEFAULTS.with_values("f32", {"blk_k": 512, "pack_seconds": 1e-9}).with_values("f64", {"grid": 1})
    assert P.PlannerParams.from_mapping(p.to_mapping()) == p
    assert P.PlannerParams.from_struct(p.to_struct()) == p
    assert p.get("f32", "blk_k") == 512 and p.get("f64", "blk_k") == P.BY_NAME["blk_k"].default
    # A table that predates a parameter plans with its declared default.
    assert P.PlannerParams.from_mapping({"blk_m": 64}) == P.DEFAULTS.with_values("f32", {"blk_m": 64}) \
        .with_values("f64", {"blk_m": 64})


def test_table_c_takes_missing_parameters_from_the_declaration():
    text = library.emit_kernel_table_c([], {"provenance": "model", "blk_m": {"f32": 64, "f64": 32}}, {})
    assert ".blk_m = {64, 32}," in text
    assert f".blk_n = {{{P.BY_NAME['blk_n'].default}, {P.BY_NAME['blk_n'].default}}}," in text
    assert "const at_tune_params at_params_builtin" in text and "const at_kernel_facts at_facts" in text


@pytest.mark.parametrize("study", ["small", "large"])
@pytest.mark.parametrize("threaded", [False, True])
def test_search_space_contains_the_default_and_suggests_inside_it(study, threaded):
    names = {p.name for p in P.searched(study, threaded)}
    assert ("thread_flops" in names) == (threaded and study == "small")
    assert names and names <= set(P.BY_NAME)
    # The install measures the edge code's speed: no study may move it (one raised it
    # to 0.13 of the peak, four times its speed, and tiny products ran on edge code).
    assert "edge_frac" not in names
    point = P.space_point(P.DEFAULTS, "f32", study, threaded)
    trial = optuna.trial.FixedTrial(point)
    assert P.suggest(trial, study, threaded) == point
    for name, value in point.items():
        param = P.BY_NAME[name]
        assert value in param.choices if param.choices else param.low <= value <= param.high
    # Values outside the range are clipped into it, on the step.
    far = P.space_point(P.DEFAULTS.with_values("f32", {n: 1e12 for n in names}), "f32", study, threaded)
    for name, value in far.items():
        param = P.BY_NAME[name]
        if not param.choices:
            assert value == (int(param.high) if param.is_int else param.high), name
