package wharf.test;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.CumulativeSum;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/**
 * Writes "put OFFSET VALUE" for every record it is put to events.file, and uses its
 * SinkTaskContext as its config asks:
 * <ul>
 *   <li>rewind.at=N: on the first put of offset N, after writing it, asks offset(tp, 0)
 *       once and ignores the rest of that batch;
 *   <li>pause.flushes=K: pauses its assignment at start and resumes it at its K-th flush;
 *   <li>report.at=N: reports the record at offset N to errantRecordReporter() (writing
 *       "no reporter" when there is none) instead of writing it;
 *   <li>jvm.report=true: at start, "jvm max.memory=BYTES marker=VALUE" with the JVM's
 *       Runtime.maxMemory() and its system property wharf.test.marker;
 *   <li>always: at start, "metrics TAGS" with the tags of a metric made through
 *       pluginMetrics() (or "metrics null"); each put records its size in a sensor.
 * </ul>
 */
public class ContextSinkTask extends SinkTask {
  Map<String, String> config;
  boolean rewound;
  int flushes;
  Sensor puts;

  @Override public String version() { return "1.0"; }

  long option(String key) {
    return Long.parseLong(config.getOrDefault(key, "-1"));
  }

  @Override public void start(Map<String, String> props) {
    config = props;
    PluginMetrics metrics = context.pluginMetrics();
    if (metrics == null) {
      Events.write(config, "metrics null");
    } else {
      MetricName name = metrics.metricName("records-put", "records put", new LinkedHashMap<>());
      puts = metrics.addSensor("records-put");
      puts.add(name, new CumulativeSum());
      Events.write(config, "metrics " + new java.util.TreeMap<>(name.tags()));
    }
    if (Boolean.parseBoolean(config.get("jvm.report"))) {
      Events.write(config, "jvm max.memory=" + Runtime.getRuntime().maxMemory()
          + " marker=" + System.getProperty("wharf.test.marker"));
    }
    if (option("pause.flushes") > 0) {
      context.pause(context.assignment().toArray(new TopicPartition[0]));
      Events.write(config, "paused " + context.assignment());
    }
  }

  @Override public void put(Collection<SinkRecord> records) {
    if (puts != null) puts.record(records.size());
    for (SinkRecord r : records) {
      if (r.kafkaOffset() == option("report.at")) {
        ErrantRecordReporter reporter = context.errantRecordReporter();
        if (reporter == null) {
          Events.write(config, "no reporter");
        } else {
          reporter.report(r, new IllegalStateException("cannot write " + r.value()));
          Events.write(config, "reported " + r.kafkaOffset());
        }
        continue;
      }
      Events.write(config, "put " + r.kafkaOffset() + " " + r.value());
      if (!rewound && r.kafkaOffset() == option("rewind.at")) {
        rewound = true;
        context.offset(new TopicPartition(r.topic(), r.kafkaPartition()), 0L);
        Events.write(config, "rewind to 0");
        return;
      }
    }
  }

  @Override public void flush(Map<TopicPartition, OffsetAndMetadata> offsets) {
    flushes++;
    if (flushes == option("pause.flushes")) {
      context.resume(context.assignment().toArray(new TopicPartition[0]));
      Events.write(config, "resumed");
    }
  }

  @Override public void stop() {}
}
