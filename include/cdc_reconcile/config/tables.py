"""The tables the reconciliation runs over: configuration as code.

``key`` lists the primary-key columns in order (a compound key lists several). The Debezium topic is
``<topic_prefix>.<name>``. It is Python, not a file, so the DAG can build its trigger form's table
choices at parse time without reading anything; ``CDC_TABLES_CONFIG`` may still point a job at a YAML
file of the same shape.
"""

TABLES = {
    "topic_prefix": "cdc",
    "watermark_table": "public.cdc_watermark",
    "tables": [
        {"name": "public.customers", "key": ["id"]},
        {"name": "public.order_lines", "key": ["order_id", "line_no"]},
    ],
}
