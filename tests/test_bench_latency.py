"""bench/latency.py's arithmetic: arms (config overlays), their merge, the levers table
and the targets' figures, on rows shaped like a real run's (no daemon, no model)."""

from __future__ import annotations

import argparse

import pytest

from bench.latency import main, merge, parse_arm, render, render_levers, summarise
from runtime.services.models import model_dir


def row(phase: str, arm: str, turn_s: float, first_s: float, order: int = 1,
        **extra: object) -> dict:
    r = {"phase": phase, "arm": arm, "case": "-", "order": order, "turn_s": turn_s,
         "first_s": first_s, "steps": 1, "prompt": 700, "evaluated": 100, "cached": 600,
         "generated": 20, "floor_s": turn_s, "ratio": 1.0, "reason": "ok"}
    r.update(extra)
    return r


def test_an_arm_is_a_name_and_a_config_overlay_with_the_models_folder():
    name, overlay = parse_arm('draft={"llm": {"serverArgs": ["-md", "{models}/d.gguf"]}}')
    assert name == "draft"
    assert overlay == {"llm": {"serverArgs": ["-md", f"{model_dir()}/d.gguf"]}}
    assert parse_arm("base=") == ("base", {})
    for bad in ("no-equals", "=[]", "x=[1]", "x={not json"):
        with pytest.raises(ValueError, match="--arm"):
            parse_arm(bad)


def test_an_overlay_merges_objects_and_replaces_lists():
    base = {"llm": {"nPredict": 128, "serverArgs": ["--no-repack"]}, "agent": {"maxSteps": 2}}
    out = merge(base, {"llm": {"serverArgs": ["--cache-reuse", "32"]}})
    assert out == {"llm": {"nPredict": 128, "serverArgs": ["--cache-reuse", "32"]},
                   "agent": {"maxSteps": 2}}
    assert base["llm"]["serverArgs"] == ["--no-repack"]  # the base is not changed


def test_the_levers_table_puts_each_arm_against_the_first():
    rows = [row("memuse", "base", 4.0, 3.0), row("memuse", "base", 6.0, 5.0),
            row("memuse", "fast", 2.0, 1.5), row("memuse", "fast", 3.0, 2.5)]
    args = argparse.Namespace(repeat=1, phases=["memuse"], llm_url=None, model=None)
    text = render_levers(args, [("base", {}), ("fast", {"llm": {"nPredict": 64}})], rows,
                         "python -m bench.latency --arm …")
    base_line = next(ln for ln in text.splitlines() if ln.startswith("| base |"))
    fast_line = next(ln for ln in text.splitlines() if ln.startswith("| fast |"))
    assert "| 5.00 |" in base_line and "×" not in base_line  # turn p50, no ratio
    assert "2.50 (0.50×)" in fast_line  # turn p50 against the baseline's 5.0 s
    assert '`{"llm": {"nPredict": 64}}`' in fast_line


def test_the_targets_count_busy_probes_that_overlapped_and_the_restart():
    rows = [row("first", "", 20.0, 19.0, order=1)]
    rows += [row("memuse", "", 3.0, 2.0, order=n) for n in range(2, 12)]
    rows += [row("busy", "", 4.0, 3.0, overlapped=True), row("busy", "", 9.0, 8.0,
                                                              overlapped=False),
             row("quiet", "", 2.0, 1.0), row("restart", "", 3.1, 3.0)]
    s = summarise(rows, 1)
    assert s["interference"] == pytest.approx(2.0)  # 4.0 / 2.0; the late probe left out
    assert (s["busy_overlapped"], s["busy_all"]) == (1, 2)
    assert s["first_after_ready_s"] == 20.0 and s["tenth_s"] == 3.0
    assert s["first_after_restart_s"] == 3.1
    args = argparse.Namespace(repeat=1, llm_url=None, model=None)
    text = render(args, rows, "python -m bench.latency", True)
    assert "| first turn after a restart vs the tenth turn (s) | 3.10 vs 3.00 | no slower | PASS |" \
        in text
    assert "| first turn after ready vs the tenth turn (s) | 20.00 vs 3.00 | no slower | FAIL |" \
        in text


@pytest.mark.parametrize("argv", [["--arm", "only=x"], ["--arm", "one={}"],
                                  ["--phases", "nothing"], ["--repeat", "0"],
                                  ["--config", "[1]"], ["--statements", "0"]])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert "error:" in capsys.readouterr().err
