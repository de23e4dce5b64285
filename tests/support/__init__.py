"""What the tests share: polling, reading Kafka, the SparkSession factory, small DataFrame builders.

Each module is imported on its own, so a unit test that needs only DataFrames does not load Kafka or
the dev stack.
"""
