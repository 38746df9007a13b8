"""Simulation speed: simulated events per second of CPU, per scenario.

Each scenario runs a few fixed seeds with tracing off (as a campaign runs
them) and with tracing on (as `kref sim --seed N --trace-file` does); the
figure is events / process CPU seconds on one core. The goal of issue 15 is
>= 10,000 events/s; the ratio to it is printed, as is the cost of tracing
(the peer in the same run). Not a test: numbers for docs/simulator.md.

    python bench/sim.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import time

from kref.sim.runner import SCENARIOS, make

GOAL = 10_000


def measure(scenario: str, seeds: int, trace: bool) -> tuple[int, float]:
    events, cpu = 0, 0.0
    for seed in range(1, seeds + 1):
        sim = make(scenario, seed, trace)
        started = time.process_time()
        sim.run()
        cpu += time.process_time() - started
        events += sim.world.events
    return events, cpu


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    print(f"{'scenario':12} {'trace':5} {'events':>9} {'cpu s':>7} {'events/s':>9} {'x goal':>7}")
    for scenario in SCENARIOS:
        for trace in (False, True):
            events, cpu = measure(scenario, args.seeds, trace)
            rate = events / cpu if cpu else float("inf")
            print(f"{scenario:12} {'on' if trace else 'off':5} {events:>9} {cpu:>7.2f} {rate:>9.0f} {rate / GOAL:>7.2f}")


if __name__ == "__main__":
    main()
