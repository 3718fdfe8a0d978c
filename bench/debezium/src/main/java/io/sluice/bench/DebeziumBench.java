package io.sluice.bench;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

/**
 * DebeziumBench captures a PostgreSQL or MariaDB workload with the Debezium
 * embedded engine and produces every change event to Kafka, so the benchmark
 * harness can compare Debezium's rate with sluice's on the same servers.
 *
 * <p>Settings come from a properties file ({@code --config <path>}) and/or
 * command-line flags ({@code --name=value} or {@code --name value}; flags win
 * over the file). The names are:
 *
 * <pre>
 *   connector       postgres | mariadb (Debezium's MariaDB connector; the jar
 *                   set built for it, see pom.xml)
 *   host, port      the database server (port 5432 / 3306 by default)
 *   user, password  its account (postgres / root by default, password empty)
 *   database        the database to capture
 *   tables          comma-separated schema.table (postgres) or db.table
 *                   (mariadb) names; empty captures every table
 *   slot            postgres: the replication slot (pgoutput), used as is
 *                   when it exists, created otherwise
 *   publication     postgres: the publication, which must exist
 *   server-id       mariadb: the replica server id of the binlog client
 *   snapshot-mode   Debezium's snapshot.mode (default no_data: no rows,
 *                   stream from the slot's position or the binlog's current
 *                   position; initial: snapshot then stream)
 *   topic-prefix    Debezium's topic.prefix; events go to
 *                   prefix.schema.table (prefix.db.table for mariadb)
 *   brokers         Kafka bootstrap servers, comma-separated
 *   records         exit once this many data-change records are acknowledged
 *   work-dir        directory for the offsets file and the schema history
 *   create-topics   create missing topics with the broker's defaults
 *                   (default true)
 *   timeout-s       give up after this many seconds (default 0: never)
 *   debezium.NAME   any other Debezium or engine property NAME
 *   producer.NAME   any other Kafka producer property NAME
 * </pre>
 *
 * <p>Protocol on stdout, one JSON object per line (everything else, logs
 * included, goes to stderr):
 *
 * <pre>
 *   {"ready":true,"ready_ms":R}
 *       once the connector streams (its streaming metrics report Connected):
 *       changes committed from now on are captured. Not printed when the
 *       record count is reached first (e.g. during an initial snapshot).
 *   {"records":N,"first_record_ms":F,"ready_ms":R,"wall_ms":W}
 *       once N data-change records are acknowledged by the broker; times in
 *       milliseconds since the engine was started, W at the last ack, F when
 *       the first data-change record reached the producer, R as above (-1
 *       when not ready before).
 * </pre>
 *
 * <p>Exit status: 0 after the result line, 1 on a failure (engine, connector
 * or producer), 2 on bad settings, 3 on timeout.
 */
public final class DebeziumBench {

    /** A bad setting: exit status 2. */
    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String msg) {
            super(msg);
        }
    }

    /** The run's settings. */
    static final class Settings {
        String connector;
        String host;
        int port;
        String user;
        String password;
        String database;
        List<String> tables = new ArrayList<>();
        String slot;
        String publication;
        long serverId;
        String snapshotMode;
        String topicPrefix;
        String brokers;
        long records;
        Path workDir;
        boolean createTopics;
        long timeoutSeconds;
        Properties debeziumExtra = new Properties();
        Properties producerExtra = new Properties();

        static Settings parse(String[] args) throws UsageException, IOException {
            Properties p = new Properties();
            Properties flags = new Properties();
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                if (!a.startsWith("--") || a.length() == 2) {
                    throw new UsageException("unexpected argument " + a + " (flags are --name=value or --name value)");
                }
                String name = a.substring(2);
                String value;
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                }
                else if (i + 1 < args.length) {
                    value = args[++i];
                }
                else {
                    throw new UsageException("flag --" + name + " has no value");
                }
                if (name.equals("config")) {
                    try (InputStream in = Files.newInputStream(Path.of(value))) {
                        p.load(in);
                    }
                }
                else {
                    flags.setProperty(name, value);
                }
            }
            p.putAll(flags);
            return from(p);
        }

        static Settings from(Properties p) throws UsageException {
            Settings s = new Settings();
            Set<String> known = new HashSet<>(List.of("connector", "host", "port", "user", "password", "database",
                    "tables", "slot", "publication", "server-id", "snapshot-mode", "topic-prefix", "brokers",
                    "records", "work-dir", "create-topics", "timeout-s"));
            for (String k : p.stringPropertyNames()) {
                if (k.startsWith("debezium.")) {
                    s.debeziumExtra.setProperty(k.substring("debezium.".length()), p.getProperty(k));
                }
                else if (k.startsWith("producer.")) {
                    s.producerExtra.setProperty(k.substring("producer.".length()), p.getProperty(k));
                }
                else if (!known.contains(k)) {
                    throw new UsageException("unknown setting " + k);
                }
            }
            s.connector = p.getProperty("connector", "").trim().toLowerCase(Locale.ROOT);
            boolean pg;
            switch (s.connector) {
                case "postgres":
                case "postgresql":
                    s.connector = "postgres";
                    pg = true;
                    break;
                case "mariadb":
                    s.connector = "mariadb";
                    pg = false;
                    break;
                default:
                    throw new UsageException("connector must be postgres or mariadb, not \"" + s.connector + "\"");
            }
            s.host = p.getProperty("host", "127.0.0.1").trim();
            s.port = (int) number(p, "port", pg ? 5432 : 3306);
            s.user = p.getProperty("user", pg ? "postgres" : "root");
            s.password = p.getProperty("password", "");
            s.database = required(p, "database");
            for (String t : p.getProperty("tables", "").split(",")) {
                if (!t.isBlank()) {
                    s.tables.add(t.trim());
                }
            }
            if (pg) {
                s.slot = required(p, "slot");
                s.publication = required(p, "publication");
            }
            else {
                s.serverId = number(p, "server-id", 0);
                if (s.serverId <= 0 || s.serverId > 0xFFFFFFFFL) {
                    throw new UsageException("server-id must be in 1..4294967295");
                }
            }
            s.snapshotMode = p.getProperty("snapshot-mode", "no_data").trim();
            s.topicPrefix = required(p, "topic-prefix");
            s.brokers = required(p, "brokers");
            s.records = number(p, "records", 0);
            if (s.records <= 0) {
                throw new UsageException("records must be positive");
            }
            s.workDir = Path.of(required(p, "work-dir"));
            s.createTopics = Boolean.parseBoolean(p.getProperty("create-topics", "true").trim());
            s.timeoutSeconds = number(p, "timeout-s", 0);
            return s;
        }

        private static String required(Properties p, String name) throws UsageException {
            String v = p.getProperty(name, "").trim();
            if (v.isEmpty()) {
                throw new UsageException("setting " + name + " is required");
            }
            return v;
        }

        private static long number(Properties p, String name, long def) throws UsageException {
            String v = p.getProperty(name, "").trim();
            if (v.isEmpty()) {
                return def;
            }
            try {
                return Long.parseLong(v);
            }
            catch (NumberFormatException e) {
                throw new UsageException(name + " is not a number: " + v);
            }
        }

        boolean postgres() {
            return connector.equals("postgres");
        }
    }

    private static PrintStream protocol;

    private final Settings s;
    /** When the engine was started: the origin of every reported time. */
    private volatile long t0;
    private final AtomicLong firstRecordNanos = new AtomicLong();
    private final AtomicLong readyNanos = new AtomicLong();
    private final AtomicLong acked = new AtomicLong();
    private volatile long lastAckNanos;
    /** Counted down once: the count is reached, or the run failed. */
    private final CountDownLatch finished = new CountDownLatch(1);
    private final AtomicReference<String> failure = new AtomicReference<>();
    private volatile boolean engineStopped;
    private final Set<String> topics = new HashSet<>();

    private KafkaProducer<byte[], byte[]> producer;
    private Admin admin;
    private JsonConverter keyConverter;
    private JsonConverter valueConverter;

    private DebeziumBench(Settings s) {
        this.s = s;
    }

    public static void main(String[] args) {
        // stdout carries the protocol only; whatever a library prints there
        // goes to stderr with the logs.
        protocol = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        defaultProperty("org.slf4j.simpleLogger.defaultLogLevel", "info");
        defaultProperty("org.slf4j.simpleLogger.log.org.apache.kafka", "warn");
        defaultProperty("org.slf4j.simpleLogger.showDateTime", "true");
        defaultProperty("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");

        int code;
        try {
            code = new DebeziumBench(Settings.parse(args)).run();
        }
        catch (UsageException e) {
            System.err.println("debezium-bench: " + e.getMessage());
            code = 2;
        }
        catch (Throwable e) {
            System.err.println("debezium-bench: " + e);
            e.printStackTrace(System.err);
            code = 1;
        }
        System.err.flush();
        protocol.flush();
        // The engine and the clients were closed (with bounds) by run; do not
        // wait for stray non-daemon threads of the connector.
        Runtime.getRuntime().halt(code);
    }

    private static void defaultProperty(String name, String value) {
        if (System.getProperty(name) == null) {
            System.setProperty(name, value);
        }
    }

    private static synchronized void emit(String line) {
        protocol.println(line);
        protocol.flush();
    }

    private double sinceStart(long nanos) {
        return nanos == 0 ? -1 : (nanos - t0) / 1e6;
    }

    private int run() throws Exception {
        Files.createDirectories(s.workDir);
        keyConverter = converter(true);
        valueConverter = converter(false);
        producer = new KafkaProducer<>(producerProperties(), new ByteArraySerializer(), new ByteArraySerializer());
        if (s.createTopics) {
            Properties ap = new Properties();
            ap.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, s.brokers);
            admin = Admin.create(ap);
        }

        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                .create(ChangeEventFormat.of(Connect.class))
                .using(engineProperties())
                .using((success, message, error) -> {
                    // The engine stopped: fine after the count (we closed it),
                    // a failure before.
                    engineStopped = true;
                    if (finished.getCount() > 0) {
                        String why = message == null || message.isBlank() ? "engine stopped" : message;
                        if (error != null && !why.contains(String.valueOf(error.getMessage()))) {
                            why += ": " + rootCause(error);
                        }
                        fail("engine stopped before " + s.records + " records (" + acked.get() + " acknowledged): " + why);
                    }
                })
                .notifying(this::handleBatch)
                .build();

        Thread engineThread = new Thread(engine, "debezium-engine");
        engineThread.setDaemon(true);
        t0 = System.nanoTime();
        engineThread.start();
        Thread watcher = new Thread(this::watchReady, "ready-watcher");
        watcher.setDaemon(true);
        watcher.start();

        boolean done;
        if (s.timeoutSeconds > 0) {
            done = finished.await(s.timeoutSeconds, TimeUnit.SECONDS);
        }
        else {
            finished.await();
            done = true;
        }
        int code;
        if (!done) {
            System.err.println("debezium-bench: timed out after " + s.timeoutSeconds + "s with " + acked.get() + " of "
                    + s.records + " records acknowledged");
            code = 3;
        }
        else if (failure.get() != null) {
            System.err.println("debezium-bench: " + failure.get());
            code = 1;
        }
        else {
            producer.flush();
            synchronized (DebeziumBench.class) { // never interleaved with the ready line
                emit(String.format(Locale.ROOT,
                        "{\"records\":%d,\"first_record_ms\":%.3f,\"ready_ms\":%.3f,\"wall_ms\":%.3f}",
                        acked.get(), sinceStart(firstRecordNanos.get()), sinceStart(readyNanos.get()),
                        sinceStart(lastAckNanos)));
            }
            code = 0;
        }
        shutdown(engine, engineThread);
        return code;
    }

    /** Closes the engine (it commits its offsets) and the clients, each with a bound. */
    private void shutdown(DebeziumEngine<?> engine, Thread engineThread) {
        Thread closer = new Thread(() -> {
            if (engineStopped) {
                return;
            }
            try {
                engine.close();
            }
            catch (IOException | RuntimeException e) {
                System.err.println("debezium-bench: closing the engine: " + e);
            }
        }, "engine-close");
        closer.setDaemon(true);
        closer.start();
        try {
            closer.join(15_000);
            engineThread.join(5_000);
        }
        catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        producer.close(java.time.Duration.ofSeconds(5));
        if (admin != null) {
            admin.close(java.time.Duration.ofSeconds(5));
        }
    }

    private static JsonConverter converter(boolean isKey) {
        // Plain JSON without the schema envelope, for keys and values alike:
        // there is no schema registry (and no Avro converter) in this setup.
        JsonConverter c = new JsonConverter();
        c.configure(Map.of("schemas.enable", "false"), isKey);
        return c;
    }

    /** The producer settings of sluice's Kafka sink. */
    private Properties producerProperties() {
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, s.brokers);
        p.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "debezium-bench-" + s.topicPrefix);
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        // sluice's sink keeps its client's default batch cap (about 1MB, the
        // broker's message.max.bytes); the Java client's 16KB would make
        // many more, smaller requests.
        p.setProperty(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        p.putAll(s.producerExtra);
        return p;
    }

    private Properties engineProperties() {
        Properties p = new Properties();
        p.setProperty("name", "sluice-bench-" + s.connector);
        p.setProperty("topic.prefix", s.topicPrefix);
        p.setProperty("database.hostname", s.host);
        p.setProperty("database.port", Integer.toString(s.port));
        p.setProperty("database.user", s.user);
        p.setProperty("database.password", s.password);
        p.setProperty("snapshot.mode", s.snapshotMode);
        // A delete is one record (op "d"), without the extra tombstone.
        p.setProperty("tombstones.on.delete", "false");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", s.workDir.resolve("offsets.dat").toString());
        p.setProperty("offset.flush.interval.ms", "10000");
        if (!s.tables.isEmpty()) {
            p.setProperty("table.include.list", String.join(",", s.tables));
        }
        if (s.postgres()) {
            p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
            p.setProperty("database.dbname", s.database);
            p.setProperty("plugin.name", "pgoutput");
            p.setProperty("slot.name", s.slot);
            p.setProperty("slot.drop.on.stop", "false");
            p.setProperty("publication.name", s.publication);
            p.setProperty("publication.autocreate.mode", "disabled");
        }
        else {
            p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
            p.setProperty("database.server.id", Long.toString(s.serverId));
            p.setProperty("database.include.list", s.database);
            p.setProperty("database.ssl.mode", "disable");
            p.setProperty("include.schema.changes", "false");
            p.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
            p.setProperty("schema.history.internal.file.filename", s.workDir.resolve("schema-history.dat").toString());
        }
        p.putAll(s.debeziumExtra);
        return p;
    }

    /**
     * Produces a batch and waits for the broker's acknowledgement of all of
     * it before the engine may commit its offsets, as a Kafka sink must.
     * Meanwhile the connector keeps reading into the engine's queue.
     */
    private void handleBatch(List<RecordChangeEvent<SourceRecord>> batch,
                             DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
            throws InterruptedException {
        CountDownLatch acks = new CountDownLatch(batch.size());
        for (RecordChangeEvent<SourceRecord> ev : batch) {
            SourceRecord r = ev.record();
            boolean data = isDataChange(r);
            if (data && firstRecordNanos.get() == 0) {
                firstRecordNanos.compareAndSet(0, System.nanoTime());
            }
            try {
                ensureTopic(r.topic());
                byte[] key = keyConverter.fromConnectData(r.topic(), r.keySchema(), r.key());
                byte[] value = valueConverter.fromConnectData(r.topic(), r.valueSchema(), r.value());
                producer.send(new ProducerRecord<>(r.topic(), r.kafkaPartition(), r.timestamp(), key, value),
                        (md, err) -> {
                            if (err != null) {
                                fail("producing to " + r.topic() + ": " + rootCause(err));
                            }
                            else if (data) {
                                counted();
                            }
                            acks.countDown();
                        });
            }
            catch (RuntimeException | ExecutionException e) {
                fail("producing to " + r.topic() + ": " + rootCause(e));
                acks.countDown();
            }
        }
        acks.await();
        if (failure.get() != null) {
            // Leave the batch uncommitted; main reports the failure.
            return;
        }
        for (RecordChangeEvent<SourceRecord> ev : batch) {
            committer.markProcessed(ev);
        }
        committer.markBatchFinished();
    }

    /** A data change carries Debezium's envelope (op, before, after, source). */
    private static boolean isDataChange(SourceRecord r) {
        return r.value() instanceof Struct && ((Struct) r.value()).schema().field("op") != null;
    }

    private void counted() {
        long n = acked.incrementAndGet();
        if (n == s.records) {
            lastAckNanos = System.nanoTime();
            finished.countDown();
        }
    }

    private void fail(String why) {
        if (failure.compareAndSet(null, why)) {
            finished.countDown();
        }
    }

    private void ensureTopic(String topic) throws ExecutionException, InterruptedException {
        if (admin == null || topics.contains(topic)) {
            return;
        }
        try {
            admin.createTopics(List.of(new NewTopic(topic, Optional.empty(), Optional.empty()))).all().get();
        }
        catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
        topics.add(topic);
    }

    /**
     * Prints the ready line once the connector streams: Debezium's streaming
     * metrics (JMX) report Connected, which the connector sets after its
     * snapshot phase, with its start position fixed.
     */
    private void watchReady() {
        try {
            MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
            ObjectName pattern = new ObjectName("debezium.*:type=connector-metrics,context=streaming,*");
            while (finished.getCount() > 0) {
                for (ObjectName name : mbs.queryNames(pattern, null)) {
                    Object connected;
                    try {
                        connected = mbs.getAttribute(name, "Connected");
                    }
                    catch (Exception e) {
                        continue; // being (un)registered
                    }
                    if (Boolean.TRUE.equals(connected)) {
                        long now = System.nanoTime();
                        synchronized (DebeziumBench.class) {
                            if (finished.getCount() > 0) {
                                readyNanos.set(now);
                                System.err.printf(Locale.ROOT, "debezium-bench: streaming (%s Connected) after %.0f ms%n",
                                        name, sinceStart(now));
                                emit(String.format(Locale.ROOT, "{\"ready\":true,\"ready_ms\":%.3f}",
                                        sinceStart(now)));
                            }
                        }
                        return;
                    }
                }
                Thread.sleep(10);
            }
        }
        catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        catch (Exception e) {
            System.err.println("debezium-bench: watching the streaming metrics: " + e);
        }
    }

    private static String rootCause(Throwable t) {
        Throwable c = t;
        while (c.getCause() != null && c.getCause() != c) {
            c = c.getCause();
        }
        return c == t ? t.toString() : t + " (caused by " + c + ")";
    }
}
