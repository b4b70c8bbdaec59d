package wharf.host;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.CodedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.connect.connector.Connector;
import org.apache.kafka.connect.connector.ConnectorContext;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.apache.kafka.connect.sink.SinkTaskContext;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;
import org.apache.kafka.connect.source.SourceTaskContext;
import org.apache.kafka.connect.storage.OffsetStorageReader;

/**
 * Wharf's JVM plugin host: runs Kafka Connect connector classes as an out-of-process Wharf
 * plugin, speaking the plugin protocol (proto/wharf/v1/plugin.proto,
 * docs/plugins-out-of-process.md) over stdin/stdout. Arguments: the connector classes to
 * offer (on the classpath), or --scan LOCATION... to offer every connector class found
 * there (a plugin.path location, PluginScan). Records cross as bytes made by the
 * connector's key.converter / value.converter (Converters: JsonConverter with
 * schemas.enable=true when unset, Connect's usual default); their headers as bytes made
 * by its header.converter (SimpleHeaderConverter when unset, Connect's default).
 *
 * <p>KIP-883/KIP-901: a stop with connector_deleted=true calls a PUBLIC stop(boolean) of the
 * connector or task class, found with Class.getMethod (inherited included), with true; every
 * other stop calls it with false; a class without a public stop(boolean) gets stop(). A
 * private or protected stop(boolean) (Debezium's BaseSourceTask has one, its internal
 * restart path) is never called.
 */
public final class PluginHost {
  static final int PROTOCOL_VERSION = 1;
  // RuntimeToPlugin body fields.
  static final int DESCRIBE = 2, CONNECTOR_START = 3, CONNECTOR_TASK_CONFIGS = 4,
      CONNECTOR_VALIDATE = 5, CONNECTOR_STOP = 6, TASK_START = 7, TASK_POLL = 8,
      TASK_COMMIT = 9, TASK_PUT = 10, TASK_FLUSH = 11, TASK_STOP = 12, CANCEL = 13,
      RELEASE = 14, OFFSETS_ANSWER = 15;
  // PluginToRuntime body fields.
  static final int A_DESCRIBE = 2, A_ERROR = 3, A_OK = 4, A_TASK_CONFIGS = 5, A_VALIDATE = 6,
      A_POLL = 7, R_RECONFIGURE = 9, R_RAISE_ERROR = 10, R_SINK_SEEK = 12,
      R_REPORT_ERRANT = 13;

  static final ObjectMapper JSON =
      new ObjectMapper().configure(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS, true);

  final Map<String, Class<? extends Connector>> plugins = new LinkedHashMap<>();
  final Map<Long, Instance> instances = new ConcurrentHashMap<>();
  final OutputStream out;
  final AtomicLong ids = new AtomicLong(1);
  /** The plugins' metrics (KIP-877 pluginMetrics()): kept in this JVM, not exported. */
  final Metrics metrics = new Metrics();

  PluginHost(OutputStream out) {
    this.out = out;
  }

  public static void main(String[] args) throws Exception {
    // stdout carries only frames: everything else the JVM or a plugin prints goes to stderr.
    OutputStream frames = new java.io.FileOutputStream(java.io.FileDescriptor.out);
    System.setOut(System.err);
    PluginHost host = new PluginHost(frames);
    if (args.length > 0 && args[0].equals("--scan")) {
      // A plugin.path location: its connectors are found, not named.
      List<java.io.File> locations = new ArrayList<>();
      for (int i = 1; i < args.length; i++) locations.add(new java.io.File(args[i]));
      long began = System.nanoTime();
      PluginScan.Found found = PluginScan.scan(locations);
      // Connectors load their own classes (drivers, ServiceLoader lookups) through the
      // context class loader; every thread the host makes inherits this one.
      Thread.currentThread().setContextClassLoader(found.loader);
      for (Class<? extends Connector> c : found.connectors) host.plugins.put(c.getName(), c);
      System.err.println("wharf-jvm-host: scanned " + locations + " in "
          + (System.nanoTime() - began) / 1_000_000 + " ms");
    } else {
      for (String name : args) {
        Class<?> c = Class.forName(name);
        if (!Connector.class.isAssignableFrom(c)) {
          throw new IllegalArgumentException(name + " is not a Kafka Connect Connector");
        }
        host.plugins.put(name, c.asSubclass(Connector.class));
      }
    }
    System.err.println("wharf-jvm-host: offering " + host.plugins.keySet());
    DataInputStream in = new DataInputStream(System.in);
    while (true) {
      byte[] msg;
      try {
        int len = in.readInt();
        msg = new byte[len];
        in.readFully(msg);
      } catch (EOFException e) {
        break;
      }
      try {
        host.handle(msg);
      } catch (Throwable t) {
        // A request that cannot even be read or dispatched (a class missing from the
        // classpath): answer it as failed rather than end the host.
        t.printStackTrace();
        try {
          host.error(num(decode(msg), 1), t);
        } catch (IOException e) {
          // not decodable: nothing to answer
        }
      }
    }
    // stdin closed: the executor is gone. A blocked call must not keep the JVM alive.
    Runtime.getRuntime().halt(0);
  }

  // ---- wire helpers --------------------------------------------------------------

  /** A message under construction. */
  static final class Msg {
    final ByteArrayOutputStream buf = new ByteArrayOutputStream();
    final CodedOutputStream o = CodedOutputStream.newInstance(buf);

    Msg u64(int field, long v) throws IOException {
      if (v != 0) o.writeUInt64(field, v);
      return this;
    }

    Msg str(int field, String s) throws IOException {
      if (s != null && !s.isEmpty()) o.writeString(field, s);
      return this;
    }

    Msg strAlways(int field, String s) throws IOException {
      o.writeString(field, s);
      return this;
    }

    Msg bytes(int field, byte[] b) throws IOException {
      o.writeByteArray(field, b);
      return this;
    }

    Msg msg(int field, Msg m) throws IOException {
      o.writeByteArray(field, m.done());
      return this;
    }

    Msg map(int field, Map<String, String> m) throws IOException {
      for (Map.Entry<String, String> e : m.entrySet()) {
        msg(field, new Msg().str(1, e.getKey()).str(2, e.getValue() == null ? "" : e.getValue()));
      }
      return this;
    }

    byte[] done() throws IOException {
      o.flush();
      return buf.toByteArray();
    }
  }

  /** A decoded message: field number to its values (Long or ByteString). */
  static Map<Integer, List<Object>> decode(byte[] b) throws IOException {
    Map<Integer, List<Object>> f = new HashMap<>();
    CodedInputStream in = CodedInputStream.newInstance(b);
    while (true) {
      int tag = in.readTag();
      if (tag == 0) return f;
      int num = tag >>> 3;
      Object v;
      switch (tag & 7) {
        case 0: v = in.readUInt64(); break;
        case 2: v = in.readBytes(); break;
        case 1: v = in.readFixed64(); break;
        case 5: v = (long) in.readFixed32(); break;
        default: throw new IOException("unsupported wire type " + (tag & 7));
      }
      f.computeIfAbsent(num, k -> new ArrayList<>()).add(v);
    }
  }

  static long num(Map<Integer, List<Object>> f, int n) {
    List<Object> v = f.get(n);
    return v == null ? 0 : (Long) v.get(v.size() - 1);
  }

  static String str(Map<Integer, List<Object>> f, int n) {
    List<Object> v = f.get(n);
    return v == null ? "" : ((ByteString) v.get(v.size() - 1)).toStringUtf8();
  }

  static byte[] raw(Map<Integer, List<Object>> f, int n) {
    List<Object> v = f.get(n);
    return v == null ? null : ((ByteString) v.get(v.size() - 1)).toByteArray();
  }

  static List<Map<Integer, List<Object>>> msgs(Map<Integer, List<Object>> f, int n)
      throws IOException {
    List<Map<Integer, List<Object>>> out = new ArrayList<>();
    for (Object o : f.getOrDefault(n, List.of())) out.add(decode(((ByteString) o).toByteArray()));
    return out;
  }

  static Map<String, String> map(Map<Integer, List<Object>> f, int n) throws IOException {
    Map<String, String> out = new TreeMap<>();
    for (Map<Integer, List<Object>> e : msgs(f, n)) out.put(str(e, 1), str(e, 2));
    return out;
  }

  synchronized void send(long requestId, int field, Msg body) {
    try {
      byte[] msg = new Msg().u64(1, requestId).msg(field, body).done();
      byte[] len = {(byte) (msg.length >>> 24), (byte) (msg.length >>> 16),
          (byte) (msg.length >>> 8), (byte) msg.length};
      out.write(len);
      out.write(msg);
      out.flush();
    } catch (IOException e) {
      // The executor is gone; stdin's end ends the host.
    }
  }

  void error(long requestId, Throwable t) {
    String text = t.getMessage() == null ? t.toString() : t.getClass().getSimpleName() + ": " + t.getMessage();
    try {
      send(requestId, A_ERROR, new Msg().str(1, text));
    } catch (IOException | RuntimeException e) {
      // nothing more to say
    }
  }

  // ---- describe ------------------------------------------------------------------

  static int configType(ConfigDef.Type t) {
    switch (t) {
      case INT: return 2;
      case LONG: return 3;
      case BOOLEAN: return 4;
      case LIST: return 5;
      case PASSWORD: return 6;
      case DOUBLE: return 7;
      default: return 1;
    }
  }

  static int importance(ConfigDef.Importance i) {
    switch (i) {
      case HIGH: return 1;
      case MEDIUM: return 2;
      default: return 3;
    }
  }

  static String defaultText(ConfigDef.ConfigKey k) {
    Object d = k.defaultValue;
    if (d instanceof List) {
      List<String> parts = new ArrayList<>();
      for (Object o : (List<?>) d) parts.add(String.valueOf(o));
      return String.join(",", parts);
    }
    if (d instanceof org.apache.kafka.common.config.types.Password) {
      return ((org.apache.kafka.common.config.types.Password) d).value();
    }
    if (d instanceof Class) return ((Class<?>) d).getName();
    return String.valueOf(d);
  }

  Msg describe() throws Exception {
    Msg m = new Msg().u64(1, PROTOCOL_VERSION);
    for (Map.Entry<String, Class<? extends Connector>> p : new ArrayList<>(plugins.entrySet())) {
      try {
        m.msg(2, describe(p.getKey(), p.getValue()));
      } catch (Throwable t) {
        // A class found by a scan that cannot even describe itself (a missing optional
        // dependency) is not offered; the others are.
        System.err.println("wharf-jvm-host: " + p.getKey() + " is not offered: cannot describe it: " + t);
        plugins.remove(p.getKey());
      }
    }
    return m;
  }

  /** One connector class as a PluginInfo: name, version, kind, deletion support, keys. */
  Msg describe(String name, Class<? extends Connector> cls) throws Exception {
    Connector c = cls.getDeclaredConstructor().newInstance();
    int kind = SinkConnector.class.isAssignableFrom(cls) ? 2 : 1;
    Msg info = new Msg().str(1, name).str(2, c.version()).u64(3, kind);
    // KIP-883/KIP-901: whether a deletion's stop(true) reaches the connector class and
    // its task class (wharf.v1.DeletionSupport: 1 declared, 2 none).
    info.u64(5, deletionAware(cls) ? 1 : 2);
    Class<? extends Task> taskClass = c.taskClass();
    if (taskClass != null) info.u64(6, deletionAware(taskClass) ? 1 : 2);
    ConfigDef def = c.config();
    if (def != null) {
      for (ConfigDef.ConfigKey k : def.configKeys().values()) {
        Msg key = new Msg().str(1, k.name).u64(2, configType(k.type));
        boolean required = k.defaultValue == ConfigDef.NO_DEFAULT_VALUE;
        if (!required && k.defaultValue != null) key.strAlways(3, defaultText(k));
        key.u64(4, importance(k.importance)).str(5, k.documentation == null ? "" : k.documentation);
        key.u64(6, k.type == ConfigDef.Type.PASSWORD ? 1 : 0).u64(7, required ? 1 : 0);
        info.msg(4, key);
      }
    }
    return info;
  }

  // ---- instances -----------------------------------------------------------------

  /** The class's public stop(boolean), inherited included, or null. */
  static Method deletionStop(Class<?> c) {
    try {
      Method m = c.getMethod("stop", boolean.class);
      return Modifier.isPublic(m.getModifiers()) ? m : null;
    } catch (NoSuchMethodException e) {
      return null;
    }
  }

  /** True when a deletion reaches the class: it has a public stop(boolean). */
  static boolean deletionAware(Class<?> c) {
    return deletionStop(c) != null;
  }

  /** The KIP-883/901 stop: a public stop(boolean) when the class has one, else stop(). */
  static String stop(Object target, boolean deleted) throws Exception {
    Method m = deletionStop(target.getClass());
    if (m != null) {
      m.invoke(target, deleted);
      return "stop(" + deleted + ")";
    }
    if (target instanceof Connector) {
      ((Connector) target).stop();
    } else {
      ((Task) target).stop();
    }
    return "stop()";
  }

  final class Instance {
    final long id;
    final ExecutorService worker;
    volatile Object obj;
    String name;
    String topic = "";
    final Map<String, Object> offsets = new HashMap<>();
    /** The connector's converters (set at a task's start; Connect's defaults before). */
    volatile Converters converters = Converters.json();
    /** Records polled since the last commit: Connect's commitRecord is called for each
     * once the record log acknowledged them (Debezium tracks the offset to flush there). */
    final List<SourceRecord> uncommitted = new ArrayList<>();
    final Set<TopicPartition> assigned = new HashSet<>();
    /** The partitions a sink paused (SinkTaskContext.pause) and the records of each held
     * back since, in order; guarded by the instance. */
    final Set<TopicPartition> paused = new HashSet<>();
    final Map<TopicPartition, List<SinkRecord>> held = new LinkedHashMap<>();
    /** Its pluginMetrics(), made on first use, closed (its metrics removed) at its stop. */
    PluginMetricsImpl pluginMetrics;
    /** Connect's metric tags of the instance: connector, and task for a task. */
    final Map<String, String> tags = new LinkedHashMap<>();

    synchronized PluginMetrics pluginMetrics() {
      if (pluginMetrics == null) pluginMetrics = new PluginMetricsImpl(metrics, tags);
      return pluginMetrics;
    }

    synchronized void closeMetrics() {
      if (pluginMetrics == null) return;
      try {
        pluginMetrics.close();
      } catch (IOException e) {
        // only removes metrics from this JVM's registry
      }
    }

    /** Takes the held records of partitions no longer paused, in order. */
    synchronized List<SinkRecord> released() {
      List<SinkRecord> out = new ArrayList<>();
      held.entrySet().removeIf(e -> {
        if (paused.contains(e.getKey())) return false;
        out.addAll(e.getValue());
        return true;
      });
      return out;
    }

    /** Holds back the records of paused partitions (and of those with records held);
     * returns the others, in order. */
    synchronized List<SinkRecord> deliverable(List<SinkRecord> records) {
      List<SinkRecord> out = new ArrayList<>();
      for (SinkRecord r : records) {
        TopicPartition tp = new TopicPartition(r.topic(), r.kafkaPartition());
        if (paused.contains(tp) || held.containsKey(tp)) {
          held.computeIfAbsent(tp, k -> new ArrayList<>()).add(r);
        } else {
          out.add(r);
        }
      }
      return out;
    }

    Instance(long id) {
      this.id = id;
      this.worker = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "wharf-instance-" + id);
        t.setDaemon(true);
        return t;
      });
    }

    void run(long requestId, Call call) {
      worker.submit(() -> {
        try {
          Msg answer = call.run();
          send(requestId, answer == null ? A_OK : answerField, answer == null ? new Msg() : answer);
        } catch (java.lang.reflect.InvocationTargetException e) {
          error(requestId, e.getCause());
        } catch (Throwable t) {
          error(requestId, t);
        } finally {
          answerField = A_OK;
        }
      });
    }

    int answerField = A_OK;
  }

  interface Call {
    Msg run() throws Exception;
  }

  Instance instance(long id, long requestId) {
    Instance i = instances.get(id);
    if (i == null) error(requestId, new IllegalStateException("no instance " + id + " in this host"));
    return i;
  }

  /**
   * An offset as Connect's offset store gives it back: integral numbers as Long (Jackson
   * reads small ones as Integer, and connectors cast to Long: Debezium's LSN).
   */
  @SuppressWarnings("unchecked")
  static Map<String, Object> longs(Map<String, Object> offset) {
    Map<String, Object> out = new java.util.LinkedHashMap<>();
    for (Map.Entry<String, Object> e : offset.entrySet()) {
      Object v = e.getValue();
      if (v instanceof Integer || v instanceof Short || v instanceof Byte) {
        v = ((Number) v).longValue();
      } else if (v instanceof Map) {
        v = longs((Map<String, Object>) v);
      }
      out.put(e.getKey(), v);
    }
    return out;
  }

  /** A JSON object's text as a map. */
  @SuppressWarnings("unchecked")
  static Map<String, Object> jsonObject(String text) throws IOException {
    return JSON.readValue(text, Map.class);
  }

  static String canonical(Object partition) throws IOException {
    return JSON.writeValueAsString(JSON.readTree(JSON.writeValueAsString(partition)));
  }

  void handle(byte[] bytes) throws Exception {
    Map<Integer, List<Object>> f = decode(bytes);
    long rid = num(f, 1);
    if (f.containsKey(DESCRIBE)) {
      try {
        send(rid, A_DESCRIBE, describe());
      } catch (Exception e) {
        error(rid, e);
      }
    } else if (f.containsKey(CONNECTOR_START)) {
      Map<Integer, List<Object>> b = decode(raw(f, CONNECTOR_START));
      Instance inst = new Instance(num(b, 1));
      instances.put(inst.id, inst);
      String plugin = str(b, 2);
      inst.name = str(b, 3);
      inst.tags.put("connector", inst.name);
      Map<String, String> config = map(b, 7);
      inst.run(rid, () -> {
        Class<? extends Connector> c = plugins.get(plugin);
        if (c == null) throw new IllegalArgumentException("no plugin " + plugin + " in this host");
        Connector connector = c.getDeclaredConstructor().newInstance();
        inst.obj = connector;
        connector.initialize(new ConnectorContext() {
          public void requestTaskReconfiguration() {
            send(ids.incrementAndGet(), R_RECONFIGURE, unchecked(() -> new Msg().u64(1, inst.id)));
          }

          public void raiseError(Exception e) {
            send(ids.incrementAndGet(), R_RAISE_ERROR,
                unchecked(() -> new Msg().u64(1, inst.id).str(2, String.valueOf(e.getMessage()))));
          }

          public PluginMetrics pluginMetrics() {
            return inst.pluginMetrics();
          }
        });
        connector.start(config);
        return null;
      });
    } else if (f.containsKey(CONNECTOR_TASK_CONFIGS)) {
      Map<Integer, List<Object>> b = decode(raw(f, CONNECTOR_TASK_CONFIGS));
      Instance inst = instance(num(b, 1), rid);
      if (inst == null) return;
      int max = (int) num(b, 2);
      inst.run(rid, () -> {
        List<Map<String, String>> configs = ((Connector) inst.obj).taskConfigs(max);
        Msg m = new Msg();
        for (Map<String, String> c : configs) m.msg(1, new Msg().map(1, c));
        inst.answerField = A_TASK_CONFIGS;
        return m;
      });
    } else if (f.containsKey(CONNECTOR_VALIDATE)) {
      Map<Integer, List<Object>> b = decode(raw(f, CONNECTOR_VALIDATE));
      Class<? extends Connector> c = plugins.get(str(b, 1));
      Map<String, String> config = map(b, 2);
      // Connect's Connector#validate, off the reader thread.
      new Thread(() -> {
        try {
          if (c == null) throw new IllegalArgumentException("no plugin " + str(b, 1) + " in this host");
          Msg m = new Msg();
          for (org.apache.kafka.common.config.ConfigValue v
              : c.getDeclaredConstructor().newInstance().validate(config).configValues()) {
            if (v.errorMessages().isEmpty()) continue;
            Msg e = new Msg().str(1, v.name());
            for (String text : v.errorMessages()) e.strAlways(2, text);
            m.msg(1, e);
          }
          send(rid, A_VALIDATE, m);
        } catch (Throwable t) {
          error(rid, t);
        }
      }, "wharf-validate").start();
    } else if (f.containsKey(CONNECTOR_STOP) || f.containsKey(TASK_STOP)) {
      Map<Integer, List<Object>> b =
          decode(raw(f, f.containsKey(CONNECTOR_STOP) ? CONNECTOR_STOP : TASK_STOP));
      Instance inst = instance(num(b, 1), rid);
      if (inst == null) return;
      boolean deleted = num(b, 2) != 0;
      inst.run(rid, () -> {
        try {
          if (inst.obj != null) {
            String how = stop(inst.obj, deleted);
            System.err.println("wharf-jvm-host: " + inst.name + " (" + inst.obj.getClass().getName()
                + "): " + how + (deleted ? " (connector deleted)" : ""));
          }
        } finally {
          instances.remove(inst.id);
          inst.closeMetrics();
          inst.worker.shutdown();
        }
        return null;
      });
    } else if (f.containsKey(TASK_START)) {
      Map<Integer, List<Object>> b = decode(raw(f, TASK_START));
      Instance inst = new Instance(num(b, 1));
      instances.put(inst.id, inst);
      String plugin = str(b, 2);
      inst.name = str(b, 3) + "-" + num(b, 4);
      inst.tags.put("connector", str(b, 3));
      inst.tags.put("task", String.valueOf(num(b, 4)));
      Map<String, String> connectorConfig = map(b, 8);
      Map<String, String> taskConfig = map(b, 9);
      for (Map<Integer, List<Object>> o : msgs(b, 10)) {
        inst.offsets.put(canonical(JSON.readValue(str(o, 1), Map.class)),
            longs(jsonObject(str(o, 2))));
      }
      String topics = connectorConfig.getOrDefault("topics", "");
      for (String t : topics.split(",")) {
        if (!t.isBlank()) inst.assigned.add(new TopicPartition(t.trim(), 0));
      }
      inst.run(rid, () -> {
        Class<? extends Connector> c = plugins.get(plugin);
        if (c == null) throw new IllegalArgumentException("no plugin " + plugin + " in this host");
        inst.converters = Converters.of(connectorConfig);
        Class<? extends Task> taskClass = c.getDeclaredConstructor().newInstance().taskClass();
        Task task = taskClass.getDeclaredConstructor().newInstance();
        inst.obj = task;
        if (task instanceof SourceTask) {
          ((SourceTask) task).initialize(new SourceTaskContext() {
            public Map<String, String> configs() {
              return taskConfig;
            }

            public OffsetStorageReader offsetStorageReader() {
              return reader(inst);
            }

            public PluginMetrics pluginMetrics() {
              return inst.pluginMetrics();
            }
          });
        } else {
          ((SinkTask) task).initialize(sinkContext(inst, taskConfig, connectorConfig));
        }
        task.start(taskConfig);
        return null;
      });
    } else if (f.containsKey(TASK_POLL)) {
      Instance inst = instance(num(decode(raw(f, TASK_POLL)), 1), rid);
      if (inst == null) return;
      inst.run(rid, () -> {
        List<SourceRecord> records = ((SourceTask) inst.obj).poll();
        Msg m = new Msg();
        if (records != null) {
          for (SourceRecord r : records) m.msg(1, sourceRecord(inst, r));
          inst.uncommitted.addAll(records);
        }
        inst.answerField = A_POLL;
        return m;
      });
    } else if (f.containsKey(TASK_COMMIT)) {
      Instance inst = instance(num(decode(raw(f, TASK_COMMIT)), 1), rid);
      if (inst == null) return;
      inst.run(rid, () -> {
        SourceTask task = (SourceTask) inst.obj;
        // The records polled so far are in the record log: Connect's per-record
        // acknowledgement (null metadata: Wharf's log has no Kafka RecordMetadata), then
        // the commit.
        for (SourceRecord r : inst.uncommitted) task.commitRecord(r, null);
        inst.uncommitted.clear();
        task.commit();
        return null;
      });
    } else if (f.containsKey(TASK_PUT)) {
      Map<Integer, List<Object>> b = decode(raw(f, TASK_PUT));
      Instance inst = instance(num(b, 1), rid);
      if (inst == null) return;
      List<Map<Integer, List<Object>>> records = msgs(b, 2);
      inst.run(rid, () -> {
        List<SinkRecord> out = new ArrayList<>();
        for (Map<Integer, List<Object>> r : records) {
          String topic = str(r, 1);
          SchemaAndValue key = raw(r, 2) == null ? SchemaAndValue.NULL
              : inst.converters.keys.toConnectData(topic, raw(r, 2));
          byte[] v = raw(r, 3);
          SchemaAndValue value = inst.converters.values.toConnectData(topic, v == null ? new byte[0] : v);
          Long ts = r.containsKey(5) ? num(r, 5) : null;
          out.add(new SinkRecord(topic, (int) num(r, 7), key.schema(), key.value(), value.schema(), value.value(),
              num(r, 6), ts, ts == null ? TimestampType.NO_TIMESTAMP_TYPE : TimestampType.CREATE_TIME,
              sinkHeaders(inst, topic, msgs(r, 4))));
        }
        // Records of paused partitions are held back; those of resumed ones go first.
        List<SinkRecord> deliver = inst.released();
        deliver.addAll(inst.deliverable(out));
        ((SinkTask) inst.obj).put(deliver);
        return null;
      });
    } else if (f.containsKey(TASK_FLUSH)) {
      Map<Integer, List<Object>> b = decode(raw(f, TASK_FLUSH));
      Instance inst = instance(num(b, 1), rid);
      if (inst == null) return;
      Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
      for (Map<Integer, List<Object>> e : msgs(b, 2)) {
        offsets.put(new TopicPartition(str(e, 1), 0), new OffsetAndMetadata(num(e, 2)));
      }
      for (Map<Integer, List<Object>> e : msgs(b, 3)) {
        offsets.put(new TopicPartition(str(e, 1), (int) num(e, 2)), new OffsetAndMetadata(num(e, 3)));
      }
      inst.run(rid, () -> {
        SinkTask task = (SinkTask) inst.obj;
        List<SinkRecord> resumed = inst.released();
        if (!resumed.isEmpty()) task.put(resumed);
        // Records still held are not flushed: the runtime delivers them again from the
        // first one (a seek), so none is acknowledged before the task got it.
        Map<TopicPartition, Long> back = new LinkedHashMap<>();
        synchronized (inst) {
          for (Map.Entry<TopicPartition, List<SinkRecord>> e : inst.held.entrySet()) {
            long first = e.getValue().get(0).kafkaOffset();
            back.put(e.getKey(), first);
            offsets.put(e.getKey(), new OffsetAndMetadata(first));
          }
          inst.held.clear();
        }
        task.flush(offsets);
        if (!back.isEmpty()) seek(inst, back);
        return null;
      });
    } else if (f.containsKey(RELEASE)) {
      Instance inst = instances.remove(num(decode(raw(f, RELEASE)), 1));
      if (inst != null) inst.worker.shutdownNow();
    } else if (f.containsKey(CANCEL) || f.containsKey(OFFSETS_ANSWER)) {
      // A cancelled call runs to its end; its answer is dropped by the runtime.
    } else {
      System.err.println("wharf-jvm-host: unknown message " + f.keySet());
    }
  }

  interface Build {
    Msg get() throws IOException;
  }

  static Msg unchecked(Build b) {
    try {
      return b.get();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  Msg sourceRecord(Instance inst, SourceRecord r) throws IOException {
    Msg m = new Msg().str(1, r.topic());
    if (r.key() != null || r.keySchema() != null) {
      m.bytes(2, inst.converters.keys.fromConnectData(r.topic(), r.keySchema(), r.key()));
    }
    byte[] v = inst.converters.values.fromConnectData(r.topic(), r.valueSchema(), r.value());
    if (v != null) m.bytes(3, v);
    for (Header h : r.headers()) {
      // PluginHeader: key 1, value 2. The protocol has no null value: a null header
      // value (SimpleHeaderConverter writes null for it) crosses as empty bytes.
      byte[] hv = inst.converters.headers.fromConnectHeader(r.topic(), h.key(), h.schema(), h.value());
      m.msg(4, new Msg().strAlways(1, h.key()).bytes(2, hv == null ? new byte[0] : hv));
    }
    if (r.timestamp() != null) m.u64(5, r.timestamp());
    m.strAlways(6, JSON.writeValueAsString(r.sourcePartition() == null ? Map.of() : r.sourcePartition()));
    m.strAlways(7, JSON.writeValueAsString(r.sourceOffset() == null ? Map.of() : r.sourceOffset()));
    return m;
  }

  /**
   * A Wharf sink record's headers (PluginHeader: key 1, value 2), in order, as Connect data
   * read with the connector's header.converter, as a Connect worker builds a SinkRecord's.
   */
  static ConnectHeaders sinkHeaders(Instance inst, String topic, List<Map<Integer, List<Object>>> headers) {
    ConnectHeaders out = new ConnectHeaders();
    for (Map<Integer, List<Object>> h : headers) {
      String key = str(h, 1);
      byte[] v = raw(h, 2);
      out.add(key, inst.converters.headers.toConnectHeader(topic, key, v == null ? new byte[0] : v));
    }
    return out;
  }

  /** Connect's OffsetStorageReader over the offsets the task was started with. */
  OffsetStorageReader reader(Instance inst) {
    return new OffsetStorageReader() {
      @SuppressWarnings("unchecked")
      public <T> Map<String, Object> offset(Map<String, T> partition) {
        try {
          return (Map<String, Object>) inst.offsets.get(canonical(partition));
        } catch (IOException e) {
          return null;
        }
      }

      public <T> Map<Map<String, T>, Map<String, Object>> offsets(Collection<Map<String, T>> partitions) {
        Map<Map<String, T>, Map<String, Object>> out = new HashMap<>();
        for (Map<String, T> p : partitions) {
          Map<String, Object> o = offset(p);
          if (o != null) out.put(p, o);
        }
        return out;
      }
    };
  }

  /** Asks the runtime to deliver each partition again from its offset (sink_seek). */
  void seek(Instance inst, Map<TopicPartition, Long> offsets) {
    send(ids.incrementAndGet(), R_SINK_SEEK, unchecked(() -> {
      Msg m = new Msg().u64(1, inst.id);
      for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
        m.msg(2, new Msg().str(1, e.getKey().topic()).u64(2, e.getKey().partition())
            .u64(3, e.getValue()));
      }
      return m;
    }));
  }

  /** A sink record as the wire's PluginSinkRecord, written by the task's converters. */
  Msg sinkRecord(Instance inst, SinkRecord r) throws IOException {
    Msg m = new Msg().str(1, r.topic());
    if (r.key() != null || r.keySchema() != null) {
      m.bytes(2, inst.converters.keys.fromConnectData(r.topic(), r.keySchema(), r.key()));
    }
    byte[] v = inst.converters.values.fromConnectData(r.topic(), r.valueSchema(), r.value());
    m.bytes(3, v == null ? new byte[0] : v);
    for (Header h : r.headers()) {
      byte[] hv = inst.converters.headers.fromConnectHeader(r.topic(), h.key(), h.schema(), h.value());
      m.msg(4, new Msg().strAlways(1, h.key()).bytes(2, hv == null ? new byte[0] : hv));
    }
    if (r.timestamp() != null) m.u64(5, r.timestamp());
    m.u64(6, r.kafkaOffset());
    m.u64(7, r.kafkaPartition() == null ? 0 : r.kafkaPartition());
    return m;
  }

  /**
   * Connect's errant record reporter under errors.tolerance=all when the connector has a
   * dead letter queue or errors.log.enable=true (as Connect's
   * SinkConnectorConfig.enableErrantRecordReporter decides): the record goes to the
   * runtime, which logs it and writes it to the DLQ before the put's records are
   * acknowledged. Null otherwise: under errors.tolerance=none the task's own failure
   * fails it, where Connect's reporter would fail it on the report.
   */
  ErrantRecordReporter reporter(Instance inst, Map<String, String> connectorConfig) {
    boolean all = connectorConfig.getOrDefault("errors.tolerance", "none").trim().equals("all");
    boolean dlq = !connectorConfig.getOrDefault("errors.deadletterqueue.topic.name", "").isBlank();
    boolean log = connectorConfig.getOrDefault("errors.log.enable", "false").trim().equalsIgnoreCase("true");
    if (!all || (!dlq && !log)) return null;
    return (record, error) -> {
      String text = error == null ? "reported by the task"
          : error.getMessage() == null ? error.toString()
          : error.getClass().getName() + ": " + error.getMessage();
      send(ids.incrementAndGet(), R_REPORT_ERRANT, unchecked(() ->
          new Msg().u64(1, inst.id).msg(2, sinkRecord(inst, record)).str(3, text)));
      return java.util.concurrent.CompletableFuture.completedFuture(null);
    };
  }

  SinkTaskContext sinkContext(Instance inst, Map<String, String> config,
      Map<String, String> connectorConfig) {
    ErrantRecordReporter reporter = reporter(inst, connectorConfig);
    return new SinkTaskContext() {
      public Map<String, String> configs() {
        return config;
      }

      public void offset(Map<TopicPartition, Long> offsets) {
        // The runtime moves the consumer before the next put: the records from each
        // offset are delivered again (a rewind) or skipped up to it. Records held for
        // those partitions come again from there.
        synchronized (inst) {
          inst.held.keySet().removeAll(offsets.keySet());
        }
        seek(inst, offsets);
      }

      public void offset(TopicPartition tp, long offset) {
        offset(Map.of(tp, offset));
      }

      public void timeout(long ms) {}

      public Set<TopicPartition> assignment() {
        return inst.assigned;
      }

      public void pause(TopicPartition... partitions) {
        synchronized (inst) {
          inst.paused.addAll(List.of(partitions));
        }
      }

      public void resume(TopicPartition... partitions) {
        synchronized (inst) {
          inst.paused.removeAll(List.of(partitions));
        }
      }

      public void requestCommit() {}

      public ErrantRecordReporter errantRecordReporter() {
        return reporter;
      }

      public PluginMetrics pluginMetrics() {
        return inst.pluginMetrics();
      }
    };
  }
}
