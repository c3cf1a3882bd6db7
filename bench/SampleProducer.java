// Synthetic PartitionSample producer for bench/bench_stream.py (run with Java's single-file source launcher:
// `java -cp KAFKA_LIBS/* bench/SampleProducer.java key=value ...`).
//
// The record shape is NOT spelled out here: bench_stream.py derives a template from a real PartitionSample
// (collectors.samples.to_json) with placeholders such as {HW}; this program only fills them in, cycle after
// cycle, over TOPICS x PER_TOPIC partitions, and sends them keyed like the collector (cluster/topic/partition)
// at RATE records/s (0: as fast as possible). sample_time_ms is the wall clock when the record is built.
// It runs in its own JVM so that neither generation nor sending competes with the job's Python.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

public class SampleProducer {
    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (String a : args) {
            int i = a.indexOf('=');
            o.put(a.substring(0, i), a.substring(i + 1));
        }
        String template = Files.readString(Path.of(o.get("template")), StandardCharsets.UTF_8);
        List<String> literals = new ArrayList<>();
        List<String> tokens = new ArrayList<>();
        int at = 0;
        while (true) {
            int open = template.indexOf('{', at);
            while (open >= 0 && (open + 1 >= template.length() || !Character.isUpperCase(template.charAt(open + 1)))) {
                open = template.indexOf('{', open + 1);
            }
            if (open < 0) {
                break;
            }
            int close = template.indexOf('}', open);
            literals.add(template.substring(at, open));
            tokens.add(template.substring(open + 1, close));
            at = close + 1;
        }
        literals.add(template.substring(at));

        String topic = o.get("topic");
        String cluster = o.get("cluster");
        int topics = Integer.parseInt(o.get("topics"));
        int perTopic = Integer.parseInt(o.get("per_topic"));
        int firstCycle = Integer.parseInt(o.get("first_cycle"));
        int cycles = Integer.parseInt(o.getOrDefault("cycles", "0"));
        double rate = Double.parseDouble(o.getOrDefault("rate", "0"));
        double duration = Double.parseDouble(o.getOrDefault("duration", "0"));
        int churn = Integer.parseInt(o.getOrDefault("churn", "0"));

        Properties props = new Properties();
        props.put("bootstrap.servers", o.get("bootstrap"));
        props.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        props.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        props.put("acks", "1");
        props.put("linger.ms", "10");
        props.put("batch.size", String.valueOf(512 * 1024));
        props.put("buffer.memory", String.valueOf(256L * 1024 * 1024));
        props.put("max.request.size", String.valueOf(8 * 1024 * 1024));
        props.put("compression.type", "zstd");

        long start = System.nanoTime();
        long sent = 0;
        long lastReport = start;
        StringBuilder sb = new StringBuilder(1024);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            outer:
            for (int c = firstCycle; cycles == 0 || c < firstCycle + cycles; c++) {
                for (int t = 0; t < topics; t++) {
                    String topicName = String.format("bench-%03d", t);
                    String topicId = String.format("BENCHTOPIC%012d", t);
                    for (int p = 0; p < perTopic; p++) {
                        long i = (long) t * perTopic + p;
                        if (rate > 0) {
                            long due = start + (long) (sent * 1e9 / rate);
                            long now = System.nanoTime();
                            if (due - now > 1_000_000) {
                                Thread.sleep((due - now) / 1_000_000);
                            }
                        }
                        long nowNs = System.nanoTime();
                        if (duration > 0 && nowNs - start > duration * 1e9) {
                            break outer;
                        }
                        int r0 = (int) (i % 3);
                        int[] replicas = {1 + r0, 1 + (r0 + 1) % 3, 1 + (r0 + 2) % 3};
                        long leo = 1000L + 100L * c + (i % 97);
                        long leo1 = leo - ((i + c) % 5);
                        boolean shrunk = churn > 0 && Math.floorMod(i * 7919L + c, 1000L) < churn;
                        long leo2 = shrunk ? leo - 90 : leo - ((i + 2L * c) % 3);
                        long hw = shrunk ? Math.min(leo, leo1) : Math.min(leo, Math.min(leo1, leo2));
                        String isr = shrunk ? "[" + replicas[0] + "," + replicas[1] + "]"
                                : "[" + replicas[0] + "," + replicas[1] + "," + replicas[2] + "]";
                        String lineage = (i + c) % 12 == 0 ? "[{\"leader_epoch\":3,\"start_offset\":0}]" : "null";
                        sb.setLength(0);
                        for (int k = 0; k < tokens.size(); k++) {
                            sb.append(literals.get(k));
                            switch (tokens.get(k)) {
                                case "CLUSTER" -> sb.append(cluster);
                                case "CYCLE" -> sb.append(c);
                                case "TIME" -> sb.append(System.currentTimeMillis());
                                case "TOPIC" -> sb.append(topicName);
                                case "TOPIC_ID" -> sb.append(topicId);
                                case "PARTITION" -> sb.append(p);
                                case "LEADER", "R0" -> sb.append(replicas[0]);
                                case "R1" -> sb.append(replicas[1]);
                                case "R2" -> sb.append(replicas[2]);
                                case "ISR" -> sb.append(isr);
                                case "HW" -> sb.append(hw);
                                case "LEO0" -> sb.append(leo);
                                case "LEO1" -> sb.append(leo1);
                                case "LEO2" -> sb.append(leo2);
                                case "LINEAGE" -> sb.append(lineage);
                                default -> throw new IllegalArgumentException("unknown token " + tokens.get(k));
                            }
                        }
                        sb.append(literals.get(tokens.size()));
                        byte[] key = (cluster + "/" + topicName + "/" + p).getBytes(StandardCharsets.UTF_8);
                        producer.send(new ProducerRecord<>(topic, key, sb.toString().getBytes(StandardCharsets.UTF_8)));
                        sent++;
                        if (nowNs - lastReport >= 1_000_000_000L) {
                            lastReport = nowNs;
                            System.out.printf("progress %.3f %d%n", System.currentTimeMillis() / 1000.0, sent);
                            System.out.flush();
                        }
                    }
                }
            }
            producer.flush();
        }
        System.out.printf("done %.3f %d %.3f%n", System.currentTimeMillis() / 1000.0, sent, (System.nanoTime() - start) / 1e9);
    }
}
