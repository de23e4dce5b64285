"""The diff bench's scaled input: N copies of a bench's pair, keys apart, so N times its differences."""

from __future__ import annotations

from pyspark.testing import assertDataFrameEqual

from bench.bench import spark_diff
from bench.diff_scale import scale_input, scaled


def test_each_copy_moves_the_keys_past_the_others(spark):
    df = spark.createDataFrame([(1, "a"), (3, None)], "id bigint, name string")
    assertDataFrameEqual(
        scaled(df, "id", 3, 4),
        spark.createDataFrame(
            [(1, "a"), (3, None), (5, "a"), (7, None), (9, "a"), (11, None)], "id bigint, name string"
        ),
    )


def test_a_scaled_pair_has_the_inputs_differences_times_the_copies(spark, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    schema = "id bigint, name string, qty int"
    # 1 stale (2), 1 missing from the lake (3), 1 extra in it (4)
    spark.createDataFrame([(1, "a", 1), (2, "b", 2), (3, "c", 3)], schema).write.parquet(str(source / "snapshot"))
    spark.createDataFrame([(1, "a", 1), (2, "b", 20), (4, "d", 4)], schema).write.parquet(str(source / "table"))
    assert scale_input(spark, source, out, 4) == 12
    found = spark_diff(spark, str(out / "snapshot"), str(out / "table"), ["id", "name", "qty"])
    assert found == {"stale": 4, "missing": 4, "extra": 4}
