# syntax=docker/dockerfile:1
# The cdc-reconcile runtime image: Airflow with a JRE, the runtime requirements (requirements.txt, no
# test tools), the product's wheel, the jars its Spark jobs load and the DAG. docker-compose.yaml runs
# every Airflow service and the Spark worker from it.
#
# The base images are pinned once, in docker-compose.yaml's x-versions, and passed in as build
# arguments (`docker compose build`); to build it alone, pass the same ones:
#   docker build --build-arg AIRFLOW_IMAGE=apache/airflow:<version>-python3.11 \
#     --build-arg MAVEN_IMAGE=maven:<version>-eclipse-temurin-17 -t cdc-reconcile/runtime .
ARG AIRFLOW_IMAGE
ARG MAVEN_IMAGE

# -- the Spark jobs' jars --------------------------------------------------------------------------
# stack/pom.xml's spark-jars execution: Spark's Kafka source and its dependencies (token provider,
# kafka-clients, commons-pool2), the PostgreSQL JDBC driver and Delta Lake, the same jars that
# scripts/setup.sh puts in .cache/stack/spark-jars. Only that execution runs: the pom's other
# executions fetch the embedded stack's Kafka and Debezium, which the compose file runs from images.
FROM ${MAVEN_IMAGE} AS spark-jars
WORKDIR /build
COPY stack/pom.xml stack/pom.xml
RUN mvn -q -B -f stack/pom.xml dependency:copy@spark-jars -Dstack.cache=/build/stack \
 && ls -l /build/stack/spark-jars

# -- the product's wheel ---------------------------------------------------------------------------
# As the README's deployment builds it; it declares no dependencies (requirements.txt pins them).
# Built as the image's airflow user in a folder it owns (setuptools writes its build folders there).
FROM ${AIRFLOW_IMAGE} AS product
RUN mkdir -p /home/airflow/cdc-reconcile
COPY --chown=airflow:0 pyproject.toml /home/airflow/cdc-reconcile/
COPY --chown=airflow:0 include /home/airflow/cdc-reconcile/include
RUN pip wheel --no-cache-dir --no-deps -w /home/airflow/cdc-reconcile/dist /home/airflow/cdc-reconcile

# -- the runtime image -----------------------------------------------------------------------------
FROM ${AIRFLOW_IMAGE} AS runtime
USER root
# Java for spark-submit's driver (in the Airflow worker) and the Spark worker's executors: Debian's
# default JRE (17 on bookworm, 21 on trixie; Spark 4.1 runs on both). The man folder is missing in
# slim images and some JRE packages' post-install scripts link into it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && apt-get autoremove -yqq --purge \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java
USER airflow
# The runtime requirements only (requirements-dev.txt adds the test tools for scripts/setup.sh), with
# the constraints the tests ran with. requirements.txt pins apache-airflow to the base image's version.
COPY requirements.txt constraints.txt /tmp/cdc-reconcile/
RUN pip install --no-cache-dir -r /tmp/cdc-reconcile/requirements.txt -c /tmp/cdc-reconcile/constraints.txt
COPY --from=product /home/airflow/cdc-reconcile/dist/ /tmp/cdc-reconcile/dist/
RUN pip install --no-cache-dir --no-deps /tmp/cdc-reconcile/dist/*.whl
COPY --from=spark-jars /build/stack/spark-jars/ /opt/cdc-reconcile/spark-jars/
# The jobs pass every jar in this folder to spark-submit (cdc_reconcile.spark.spark_jars).
ENV CDC_SPARK_JARS=/opt/cdc-reconcile/spark-jars
# The project's Airflow configuration; the compose file's environment overrides what differs in
# containers (executor, API server address, DAGs paused at creation).
COPY --chown=airflow:0 airflow.cfg /opt/airflow/airflow.cfg
COPY --chown=airflow:0 dags/ /opt/airflow/dags/
# Mount points of the lake and GX volumes: a new volume takes this owner and mode.
RUN mkdir -p /opt/airflow/lake /opt/airflow/great_expectations /opt/airflow/auth \
 && chmod 0775 /opt/airflow/lake /opt/airflow/great_expectations /opt/airflow/auth
