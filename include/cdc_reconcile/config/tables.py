"""The tables the reconciliation runs over: configuration as code.

``key`` lists the primary-key columns in order (a compound key lists several). The Debezium topic is
``<topic_prefix>.<name>``. The built-in default: a deployment names its own YAML file of the same
shape in ``CDC_TABLES_CONFIG`` (``cdc-tables add`` starts one from this), read by the DAG's tasks and
the jobs alike.
"""

TABLES = {
    "topic_prefix": "cdc",
    "watermark_table": "public.cdc_watermark",
    "tables": [
        {"name": "public.customers", "key": ["id"]},
        {"name": "public.order_lines", "key": ["order_id", "line_no"]},
    ],
}
