"""The stage profile reads Spark's own event log: plain, and Spark 4's rolling zstd folder."""

from __future__ import annotations

import json

import pytest

from bench import stage_times


def event_log_lines() -> list[str]:
    def stage(stage_id: int, tasks: int, submitted: int, completed: int, run_ms: int, shuffle: int) -> dict:
        return {
            "Event": "SparkListenerStageCompleted",
            "Stage Info": {
                "Stage ID": stage_id,
                "Stage Name": f"parquet at stage {stage_id}",
                "Number of Tasks": tasks,
                "Submission Time": submitted,
                "Completion Time": completed,
                "Accumulables": [
                    {"Name": "internal.metrics.executorRunTime", "Value": run_ms},
                    {"Name": "internal.metrics.shuffle.write.bytesWritten", "Value": shuffle},
                    {"Name": "internal.metrics.resultSize", "Value": 99},
                ],
            },
        }

    events = [
        {"Event": "SparkListenerApplicationStart", "Timestamp": 1_000},
        {
            "Event": "SparkListenerJobStart",
            "Job ID": 7,
            "Stage IDs": [0, 1],
            "Properties": {"spark.job.description": "compact_cdc t: events"},
        },
        stage(0, 2, 1_000, 4_000, 5_800, 2 * 2**20),
        stage(1, 1, 4_000, 5_000, 900, 0),
        {"Event": "SparkListenerApplicationEnd", "Timestamp": 11_000},
    ]
    return [json.dumps(e) for e in events] + ['{"Event": "SparkListenerStageSubmitted", "Stage In']  # still writing


def test_stages_with_their_job_description_tasks_and_metrics(tmp_path):
    log = tmp_path / "app-1"
    log.write_text("\n".join(event_log_lines()))
    stages, app_ms = stage_times.read_stages(log)
    assert app_ms == 10_000
    assert [(s.stage_id, s.job, s.tasks, s.wall_ms) for s in stages] == [(0, 7, 2, 3_000), (1, 7, 1, 1_000)]
    assert stages[0].totals == {"run_ms": 5_800, "shuffle_write": 2 * 2**20}
    assert stages[0].description == "compact_cdc t: events"
    text = stage_times.report(stages, app_ms, top=1)
    assert text.startswith(
        "2 stages, 4.0 s of stage wall time in an application of 10.0 s; single-task stages 1.0 s (25%)"
    )
    assert "| 0 | 7 | 2 | 3.00 | 5.80 | - | 2 | - | - | compact_cdc t: events |" in text
    assert "| compact_cdc t: events | 1 | 2 | 4.00 | 6.70 |" in text  # by what: 1 job, 2 stages
    assert "| 1 | 7 |" not in text  # --top 1


def test_rolling_zstd_folder_is_read_in_file_order(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    folder = tmp_path / "eventlog_v2_local-1"
    folder.mkdir()
    lines = event_log_lines()
    for index, chunk in ((2, lines[3:]), (1, lines[:3])):
        data = ("\n".join(chunk) + "\n").encode()
        (folder / f"events_{index}_local-1.zstd").write_bytes(zstandard.ZstdCompressor().compress(data))
    stages, app_ms = stage_times.read_stages(folder)
    assert [s.stage_id for s in stages] == [0, 1] and app_ms == 10_000


def test_a_folder_lists_plain_logs_and_rolling_folders_but_not_other_entries(tmp_path):
    (tmp_path / "local-1").write_text("")
    (tmp_path / "eventlog_v2_local-2").mkdir()
    (tmp_path / "spark-defaults.conf.d").mkdir()  # any other folder is not an application's log
    assert [p.name for p in stage_times.event_logs(tmp_path)] == ["eventlog_v2_local-2", "local-1"]
