"""kref/broker/loop_steps.py: the step budget that slices per-partition work, and the step monitor
whose report bench/kraft_failover.py reads back."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import trio

from kref.broker.loop_steps import LoopStepMonitor, StepBudget


def test_a_spent_budget_gives_the_loop_back_and_an_unspent_one_does_not():
    order: list[str] = []

    async def sliced(budget_ms: float, name: str) -> None:
        budget = StepBudget(budget_ms)
        for _ in range(3):
            order.append(name)
            await budget.spend()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sliced, 0.0, "a")  # spent after every unit: interleaves
            nursery.start_soon(sliced, 0.0, "b")
        assert sorted(order[:2]) == ["a", "b"] and sorted(order[2:4]) == ["a", "b"]
        order.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sliced, 1e9, "a")  # never spent: one step runs all three
            nursery.start_soon(sliced, 1e9, "b")
        assert order in (["a"] * 3 + ["b"] * 3, ["b"] * 3 + ["a"] * 3)

    trio.run(main)


def test_the_monitor_reports_steps_in_the_line_the_bench_parses(caplog):
    monitor = LoopStepMonitor(report_s=0.5)

    async def main() -> None:
        for _ in range(20):
            await trio.sleep(0.05)

    with caplog.at_level(logging.INFO, logger="kref.loop_steps"):
        trio.run(main, instruments=[monitor])
    assert monitor.run_longest_ms > 0 and monitor.run_longest_task
    spec = importlib.util.spec_from_file_location(
        "kraft_failover", Path(__file__).resolve().parents[2] / "bench" / "kraft_failover.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    reports = [m for r in caplog.records if (m := bench.LOOP_LINE.search(r.getMessage()))]
    assert reports, [r.getMessage() for r in caplog.records]
    assert int(reports[0].group(1)) > 0  # steps counted
    assert any("longest of the run" in r.getMessage() for r in caplog.records)
