# replmon's image: the collector, the log-dir agents and the streaming job of docker-compose.yml, and Spark's driver
# and executor image on Kubernetes (deploy/entrypoint.sh; docs/deploy.md, "Kubernetes").
# bookworm, not the newer default of python:3.11-slim: Debian 13 no longer ships OpenJDK 17, which Spark needs.
FROM python:3.11-slim-bookworm

# tini: the init process of Spark's own image (it reaps the Python workers and forwards signals)
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY replmon replmon
COPY collectors collectors
COPY streaming streaming
COPY dashboards dashboards
RUN pip install --no-cache-dir . && rm -rf /src

# pip's pyspark is a whole Spark distribution: bin/spark-submit, bin/spark-class and jars/ (spark-kubernetes and
# spark-yarn among them). The job's spark-submit entry file is replmon/cli/submit.py in the same site-packages.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=python3
RUN test "$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" = "$SPARK_HOME" \
 && test -x "$SPARK_HOME/bin/spark-submit" \
 && test -f "$SPARK_HOME/../replmon/cli/submit.py"

COPY deploy/entrypoint.sh /opt/replmon/entrypoint.sh

# uid 1000 like the apache/kafka image's appuser: the agents read the brokers' data volumes read-only. Numeric, so
# that Kubernetes can tell it is not root (runAsNonRoot).
RUN chmod 0755 /opt/replmon/entrypoint.sh \
 && useradd --uid 1000 --create-home replmon && mkdir -p /var/lib/replmon && chown replmon /var/lib/replmon
USER 1000
WORKDIR /home/replmon
ENV REPLMON_STATE_DIR=/var/lib/replmon

# `driver ...` and `executor` (Spark on Kubernetes) start Spark; anything else runs `replmon ...`
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/replmon/entrypoint.sh"]
CMD ["--help"]
