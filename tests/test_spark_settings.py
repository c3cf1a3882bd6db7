"""The operator's Spark settings read as Spark reads them: a master or a setting Spark would refuse, or replmon could
not read, is one line when the configuration loads; YAML's numbers and booleans are Spark's spelling. Checked
against Spark itself: its own master regexes and URL parser, its size parser and the JVM's -Xmx."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from replmon.core.config import load_config
from replmon.core.errors import ReplmonError
from replmon.core.spark_settings import JVM_SIZE, SIZES, local_threads, master_problem, setting_problem
from replmon.testbed.localcluster.artifacts import java_executable

MASTERS = ["local", "local[2]", "local[*]", "local[3,2]", "local[*, 4]", "local[0]", "local[two]", "local[2",
           "locall[2]", "local[ 2]", "local-cluster[2,1,1024]", "local-cluster[2, 1]", "spark://h:7077",
           "spark://h1:7077,h2:7077", "spark://h", "spark://h:port", "spark:/h:7077", "spark://:7077", "yarn",
           "k8s://https://k8s.example:6443", "", "local [2]"]
SIZES_GIVEN = ["2g", "2G", "2048m", "3145728k", "1073741824", "2gb", "2 g", "1.5g", "g", "-1g", "2x", "3p", "7b"]
"""Memory sizes, none so small that the JVM would refuse it as a heap for its size (a few kilobytes; Spark's own
minimum, 450 MiB, refuses those with its own message when it starts)."""


@pytest.mark.parametrize(("master", "threads"), [("local", 1), ("local[2]", 2), ("local[3,2]", 3),
                                                 ("local[*]", os.cpu_count()), ("spark://h:7077", None),
                                                 ("yarn", None), ("local-cluster[2,1,1024]", None)])
def test_a_local_master_s_threads(master: str, threads: int | None) -> None:
    assert local_threads(master) == threads


@pytest.mark.parametrize(("text", "said"), [
    ("stream: {spark_master: 'local[two]'}",
     "stream.spark_master: 'local[two]' is not a master URL Spark reads (local, local[N], local[*], local[N,F], "
     "local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], yarn, k8s://URL)"),
    ("stream: {spark_master: 'local[0]'}", "stream.spark_master: 'local[0]' runs no task: local[N] needs N of at "
                                           "least 1"),
    ("stream: {spark_master: 'spark://master'}", "stream.spark_master: 'spark://master' is not a master URL Spark "
                                                 "reads (local, "),
    ("stream: {spark_conf: {spark.master: 'local[x]', spark.cores.max: '0', spark.driver.memory: 2gb}}",
     "stream.spark_conf: spark.master: 'local[x]' is not a master URL Spark reads (local, "),
    ("stream: {spark_conf: {spark.executor.instances: two, spark.executor.memory: 1.5g}}",
     "stream.spark_conf: spark.executor.instances: 'two' is not a count of at least 1; spark.executor.memory: '1.5g' "
     "is not a size: a whole number with k, m, g or t (2g, 2048m)"),
    ("stream: {spark_conf: {spark.sql.shuffle.partitions: many}}",
     "stream.spark_conf: spark.sql.shuffle.partitions: 'many' is not a count of at least 1"),
    ("stream: {spark_conf: {spark.driver.memory: 2gb}}",
     "stream.spark_conf: spark.driver.memory: '2gb' is not a JVM memory size: a whole number with k, m, g or t (2g, "
     "2048m)"),
    ("stream: {spark_conf: {spark.executor.cores: [1, 2]}}",
     "stream.spark_conf: a Spark setting's value is a string, a number or true/false, not list"),
])
def test_a_spark_setting_spark_would_refuse_is_one_line_at_load(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "replmon.yaml"
    path.write_text(text)
    with pytest.raises(ReplmonError) as refused:
        load_config(path, env={})
    assert said in str(refused.value)
    if "spark.cores.max" in text:  # every problem of the mapping in the one line
        assert "spark.cores.max: '0' is not a count of at least 1" in str(refused.value)
        assert "spark.driver.memory: '2gb' is not a JVM memory size" in str(refused.value)


def test_yaml_numbers_and_booleans_are_spark_s_spelling(tmp_path: Path) -> None:
    """``spark.executor.cores: 2`` as YAML writes it, not a refusal for not being a string; a boolean is Spark's
    lower-case true/false, not Python's False; from the file and from the environment alike."""
    path = tmp_path / "replmon.yaml"
    path.write_text("stream:\n  spark_master: spark://m1:7077,m2:7077\n  spark_conf:\n    spark.executor.cores: 2\n"
                    "    spark.sql.adaptive.enabled: false\n    spark.network.timeout: 120s\n"
                    "    spark.memory.fraction: 0.5\n")
    stream = load_config(path, env={}).stream
    assert stream.spark_conf == {"spark.executor.cores": "2", "spark.sql.adaptive.enabled": "false",
                                 "spark.network.timeout": "120s", "spark.memory.fraction": "0.5"}
    env = {"REPLMON_STREAM__SPARK_CONF": '{"spark.cores.max": 4, "spark.speculation": true}'}
    assert load_config(path, env=env).stream.spark_conf == {**stream.spark_conf, "spark.cores.max": "4",
                                                            "spark.speculation": "true"}


def jvm_takes_heap(size: str) -> bool:
    """Whether the JVM starts with -Xmx<size>: the driver's JVM gets spark.driver.memory so."""
    started = subprocess.run([java_executable(), f"-Xmx{size}", "-version"], capture_output=True, text=True,
                             timeout=60)
    return started.returncode == 0


def test_a_driver_memory_is_refused_exactly_when_the_jvm_refuses_it_as_its_heap() -> None:
    refused = {size for size in SIZES_GIVEN if setting_problem("spark.driver.memory", size) is not None}
    assert refused == {size for size in SIZES_GIVEN if not jvm_takes_heap(size)}
    assert SIZES["spark.driver.memory"][0] is JVM_SIZE


def test_masters_and_sizes_are_read_as_spark_reads_them(spark: SparkSession) -> None:
    """Spark's own readers as the oracle: its master regexes (a local master), its standalone URL parser, its size
    parser (the executor's memory); a master replmon lets pass to a cluster manager is one Spark does not parse."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    regexes = jvm.org.apache.spark.SparkMasterRegex

    def spark_reads(master: str) -> bool:
        if master == "local":
            return True
        if master.startswith("local"):
            local = [regexes.LOCAL_N_REGEX(), regexes.LOCAL_N_FAILURES_REGEX(), regexes.LOCAL_CLUSTER_REGEX()]
            # local[0] matches, and Spark refuses it when it makes its scheduler: "Asked to run locally with 0 threads"
            return any(r.pattern().matcher(master).matches() for r in local) and master != "local[0]"
        if not regexes.SPARK_REGEX().pattern().matcher(master).matches():
            return False
        try:
            for server in master.removeprefix("spark://").split(","):
                jvm.org.apache.spark.util.Utils.extractHostPortFromSparkUrl(f"spark://{server}")
        except Exception:  # Spark's SparkException: "Invalid master URL"
            return False
        return True

    parsed = [m for m in MASTERS if m.startswith(("local", "spark:"))]  # the rest is a cluster manager's to read
    taken = {m for m in parsed if spark_reads(m)}
    assert taken and taken != set(parsed)
    assert {m for m in parsed if master_problem(m) is None} == taken

    def spark_size(size: str) -> bool:
        try:
            jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(size)
        except Exception:  # NumberFormatException: "Size must be specified as bytes (b), kibibytes (k), ..."
            return False
        return True

    assert ({s for s in SIZES_GIVEN if setting_problem("spark.executor.memory", s) is None}
            == {s for s in SIZES_GIVEN if spark_size(s)})


@pytest.mark.parametrize(("master", "problem"), [("yarn", None), ("k8s://https://k8s.example:6443", None),
                                                 ("", "'' is not a master URL (local, "),
                                                 ("yarn cluster", "'yarn cluster' is not a master URL (local, ")])
def test_a_master_for_a_cluster_manager_is_left_to_it_unless_it_is_no_url(master: str, problem: str | None) -> None:
    said = master_problem(master)
    assert said == problem if problem is None else said is not None and said.startswith(problem)
