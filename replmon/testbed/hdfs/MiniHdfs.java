// A one-datanode HDFS on loopback for replmon's tests: Hadoop's MiniDFSCluster, run with Java's source launcher
//   java -cp <jars> MiniHdfs.java <base_dir> <namenode_port>      (port 0: a free one)
// Every address is bound to 127.0.0.1 and permissions are off (any user may write). Prints one line
// "HDFS_READY hdfs://127.0.0.1:<port>" on stdout once the datanode has registered; Hadoop's log goes to stderr.
// Stops on SIGTERM, SIGINT or when stdin closes (the parent died), by shutting the cluster down itself before the
// JVM exits: from a JVM shutdown hook it cannot (Hadoop's ShutdownHookManager then refuses the DataNode's hook
// removal and the DataNode's shutdown dies half-way).
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

import sun.misc.Signal;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: java -cp <jars> MiniHdfs.java <base_dir> <namenode_port>");
            System.exit(2);
        }
        File base = new File(args[0]).getAbsoluteFile();
        int port = Integer.parseInt(args[1]);
        // stdout carries the READY line alone: a library's prints must not fill a pipe that nobody reads
        PrintStream ready = System.out;
        System.setOut(System.err);
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel",
            System.getProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn"));
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        System.setProperty("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");

        CountDownLatch stop = new CountDownLatch(1);
        Signal.handle(new Signal("TERM"), s -> stop.countDown());
        Signal.handle(new Signal("INT"), s -> stop.countDown());
        Thread stdinWatch = new Thread(() -> {
            try {
                while (System.in.read() != -1) { /* nothing is sent on stdin; EOF means the parent is gone */ }
            } catch (IOException ignored) {
                // a broken stdin is a closed one
            }
            stop.countDown();
        }, "minihdfs-stdin");
        stdinWatch.setDaemon(true);
        stdinWatch.start();

        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath());
        conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
        conf.setBoolean("dfs.permissions.enabled", false);
        conf.setInt("dfs.replication", 1);
        conf.setInt("dfs.namenode.safemode.extension", 0);
        // web UIs cannot be switched off: bound to loopback on free ports
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.https.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.datanode.hostname", "127.0.0.1");

        MiniDFSCluster cluster = null;
        try {
            cluster = new MiniDFSCluster.Builder(conf, base)
                .numDataNodes(1).storagesPerDatanode(1).nameNodePort(port).nameNodeHttpPort(0)
                .checkDataNodeAddrConfig(true).format(true).build();
            cluster.waitActive();
        } catch (Throwable t) {
            t.printStackTrace();
            Throwable root = t;
            while (root.getCause() != null) root = root.getCause();
            // the log's last line, for the Python side's error: the reason, not the bottom of a stack trace
            System.err.println("MiniHdfs: cannot start: " + root);
            if (cluster != null) cluster.shutdown();
            System.exit(1);
        }
        try {
            if (stop.getCount() > 0) {
                ready.println("HDFS_READY hdfs://127.0.0.1:" + cluster.getNameNodePort());
                ready.flush();
            }
            stop.await();
        } finally {
            cluster.shutdown();
        }
        System.err.println("MiniHdfs: stopped");
        System.exit(0);
    }
}
