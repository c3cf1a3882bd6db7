# replmon's image for docker-compose.yml: the collector, the log-dir agents and the streaming job.
# bookworm, not the newer default of python:3.11-slim: Debian 13 no longer ships OpenJDK 17, which Spark needs.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY replmon replmon
COPY collectors collectors
COPY streaming streaming
COPY dashboards dashboards
RUN pip install --no-cache-dir . && rm -rf /src

# uid 1000 like the apache/kafka image's appuser: the agents read the brokers' data volumes read-only
RUN useradd --uid 1000 --create-home replmon && mkdir -p /var/lib/replmon && chown replmon /var/lib/replmon
USER replmon
WORKDIR /home/replmon
ENV REPLMON_STATE_DIR=/var/lib/replmon

ENTRYPOINT ["replmon"]
CMD ["--help"]
