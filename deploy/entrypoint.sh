#!/bin/bash
#
# The entrypoint of replmon's image (Dockerfile), under tini: Spark's driver and executor on Kubernetes, and the
# replmon command line for anything else (docker-compose.yml: `collect ...`, `agent ...`, `stream ...`).
#
# Spark on Kubernetes starts its driver and executor pods with the application's image and passes `driver ...` or
# `executor` as the container's arguments, with its settings in environment variables. The `driver` and `executor`
# branches below build the commands of Spark's own image entrypoint, Apache Spark v4.0.0 (Apache License 2.0):
#   resource-managers/kubernetes/docker/src/main/dockerfiles/spark/entrypoint.sh
#   https://github.com/apache/spark/blob/v4.0.0/resource-managers/kubernetes/docker/src/main/dockerfiles/spark/entrypoint.sh
# with these differences, none of them visible to Spark:
#   - tini is the image's ENTRYPOINT, which runs this script, instead of being exec'ed by it: the same processes;
#   - SPARK_JAVA_OPT_* are read straight into the array, not through the java_opts.txt file upstream leaves in the
#     working directory (spark.executor.extraJavaOptions may carry secrets);
#   - the variables in the executor's command are quoted (as in the apache/spark-docker image's entrypoint);
#   - no `set -x` (the replmon commands' output stays theirs).
# SPARK_HOME is the pip-installed pyspark package, a whole Spark distribution (bin/spark-submit, jars/ with
# spark-kubernetes); the image sets it, and without it the python3 on PATH says where pyspark is.
#
# REPLMON_ENTRYPOINT_DRY_RUN=1 prints the command, each argument followed by a NUL byte, instead of running it
# (tests/test_deploy.py).

set -eo pipefail

run() {
  if [ -n "${REPLMON_ENTRYPOINT_DRY_RUN:-}" ]; then
    printf '%s\0' "$@"
    exit 0
  fi
  exec "$@"
}

case "${1:-}" in
  driver|executor) ;;
  *) run replmon "$@" ;;
esac

if [ -z "${SPARK_HOME:-}" ]; then
  SPARK_HOME="$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
fi
export SPARK_HOME

# From here on: upstream's entrypoint.sh.

# Check whether there is a passwd entry for the container UID
myuid=$(id -u)
mygid=$(id -g)
# turn off -e for getent because it will return error code in anonymous uid case
set +e
uidentry=$(getent passwd "$myuid")
set -e

# If there is no passwd entry for the container UID, attempt to create one
if [ -z "$uidentry" ] ; then
    if [ -w /etc/passwd ] ; then
        echo "$myuid:x:$myuid:$mygid:${SPARK_USER_NAME:-anonymous uid}:$SPARK_HOME:/bin/false" >> /etc/passwd
    else
        echo "Container ENTRYPOINT failed to add passwd entry for anonymous UID"
    fi
fi

if [ -z "$JAVA_HOME" ]; then
  JAVA_HOME=$(java -XshowSettings:properties -version 2>&1 > /dev/null | grep 'java.home' | awk '{print $3}')
fi

SPARK_CLASSPATH="$SPARK_CLASSPATH:${SPARK_HOME}/jars/*"
readarray -t SPARK_EXECUTOR_JAVA_OPTS < <(env | grep SPARK_JAVA_OPT_ | sort -t_ -k4 -n | sed 's/[^=]*=\(.*\)/\1/g')

if [ -n "$SPARK_EXTRA_CLASSPATH" ]; then
  SPARK_CLASSPATH="$SPARK_CLASSPATH:$SPARK_EXTRA_CLASSPATH"
fi

if ! [ -z "${PYSPARK_PYTHON+x}" ]; then
    export PYSPARK_PYTHON
fi
if ! [ -z "${PYSPARK_DRIVER_PYTHON+x}" ]; then
    export PYSPARK_DRIVER_PYTHON
fi

# If HADOOP_HOME is set and SPARK_DIST_CLASSPATH is not set, set it here so Hadoop jars are available to the executor.
# It does not set SPARK_DIST_CLASSPATH if already set, to avoid overriding customizations of this value from elsewhere e.g. Docker/K8s.
if [ -n "${HADOOP_HOME}"  ] && [ -z "${SPARK_DIST_CLASSPATH}"  ]; then
  export SPARK_DIST_CLASSPATH="$($HADOOP_HOME/bin/hadoop classpath)"
fi

if ! [ -z "${HADOOP_CONF_DIR+x}" ]; then
  SPARK_CLASSPATH="$HADOOP_CONF_DIR:$SPARK_CLASSPATH";
fi

if ! [ -z "${SPARK_CONF_DIR+x}" ]; then
  SPARK_CLASSPATH="$SPARK_CONF_DIR:$SPARK_CLASSPATH";
elif ! [ -z "${SPARK_HOME+x}" ]; then
  SPARK_CLASSPATH="$SPARK_HOME/conf:$SPARK_CLASSPATH";
fi

# SPARK-43540: add current working directory into executor classpath
SPARK_CLASSPATH="$SPARK_CLASSPATH:$PWD"

case "$1" in
  driver)
    shift 1
    CMD=(
      "$SPARK_HOME/bin/spark-submit"
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS"
      --deploy-mode client
      "$@"
    )
    ;;
  executor)
    shift 1
    CMD=(
      "${JAVA_HOME}/bin/java"
      "${SPARK_EXECUTOR_JAVA_OPTS[@]}"
      -Xms"$SPARK_EXECUTOR_MEMORY"
      -Xmx"$SPARK_EXECUTOR_MEMORY"
      -cp "$SPARK_CLASSPATH:$SPARK_DIST_CLASSPATH"
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
      --driver-url "$SPARK_DRIVER_URL"
      --executor-id "$SPARK_EXECUTOR_ID"
      --cores "$SPARK_EXECUTOR_CORES"
      --app-id "$SPARK_APPLICATION_ID"
      --hostname "$SPARK_EXECUTOR_POD_IP"
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID"
      --podName "$SPARK_EXECUTOR_POD_NAME"
    )
    ;;
esac

run "${CMD[@]}"
