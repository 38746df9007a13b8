"""`kref sim --seeds A..B --engine spark`: the campaign as a real (local) Spark job
writing Parquet. Two seeds on local[2], so the cost is mostly Spark's start."""

from __future__ import annotations

import pytest

from kref.sim.campaign import run_campaign


def test_spark_campaign_writes_parquet(tmp_path):
    pytest.importorskip("pyspark")
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "campaign.parquet"
    summary = run_campaign(range(1, 3), engine="spark", master="local[2]", output=str(out),
                           scenarios=("quorum",))
    assert summary["runs"] == 2 and summary["violations"] == 0, summary
    table = pq.read_table(str(out))
    assert sorted(table.column("seed").to_pylist()) == [1, 2]
    assert all(e > 0 for e in table.column("events").to_pylist())
