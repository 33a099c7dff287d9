package statekit.kafkatest;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * Creates a topic on the test broker (when it does not exist yet) and appends records to its partitions.
 *
 * <p>Args: BOOTSTRAP TOPIC PARTITIONS (P=N[@TS][:PREFIX])... - N records with values "PREFIX-P-i" (i = 0..N-1 counted
 * from the partition's current end) to partition P, each sent synchronously; with @TS record i carries the timestamp
 * TS + 1000 * i (epoch milliseconds; else the producer's clock). Prints one line per record,
 * "PRODUCED partition offset value", so the test knows every offset the broker gave.
 */
public class KafkaTool {
    public static void main(String[] args) throws Exception {
        List<String> counts = new java.util.ArrayList<>(List.of(args).subList(3, args.length));
        produce(args[0], args[1], Integer.parseInt(args[2]), counts);
        System.out.flush();
        System.exit(0);
    }

    /** Create `topic` with `partitions` unless it exists, then append the records "P=N[:PREFIX]" asks for. */
    static void produce(String bootstrap, String topic, int partitions, List<String> counts) throws Exception {
        Properties admin = new Properties();
        admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin a = Admin.create(admin)) {
            Set<String> names = a.listTopics().names().get(60, TimeUnit.SECONDS);
            if (!names.contains(topic)) {
                a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
            }
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (String spec : counts) {
                String[] pn = spec.split("=", 2);
                int partition = Integer.parseInt(pn[0]);
                String[] np = pn[1].split(":", 2);
                String[] nt = np[0].split("@", 2);
                int n = Integer.parseInt(nt[0]);
                Long base = nt.length > 1 ? Long.parseLong(nt[1]) : null;
                String prefix = np.length > 1 ? np[1] : "r";
                for (int j = 0; j < n; j++) {
                    String value = prefix + "-" + partition + "-" + j;
                    Long ts = base == null ? null : base + 1000L * j;
                    RecordMetadata md = producer.send(new ProducerRecord<>(topic, partition, ts, null, value))
                            .get(60, TimeUnit.SECONDS);
                    System.out.println("PRODUCED " + md.partition() + " " + md.offset() + " " + value);
                }
            }
            producer.flush();
        }
    }
}
