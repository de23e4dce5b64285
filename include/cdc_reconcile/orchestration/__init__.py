"""The Airflow adapter: task bodies, Jinja macros and the alert notifier the DAG wires together.

The only part of the product that imports Airflow. Importing it loads neither Spark, Kafka clients
nor Great Expectations: the DAG file imports it at parse time.
"""
