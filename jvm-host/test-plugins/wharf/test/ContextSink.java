package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

/** A test sink whose task uses the SinkTaskContext as its config asks (ContextSinkTask). */
public class ContextSink extends SinkConnector {
  Map<String, String> config;

  @Override public void start(Map<String, String> props) { config = props; }
  @Override public Class<? extends Task> taskClass() { return ContextSinkTask.class; }
  @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(config); }
  @Override public void stop() {}
  @Override public ConfigDef config() {
    return new ConfigDef()
        .define("events.file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "where the records put are written")
        .define("rewind.at", ConfigDef.Type.LONG, -1L, ConfigDef.Importance.LOW,
            "on the first put of this offset, ask offset(tp, 0) once")
        .define("pause.flushes", ConfigDef.Type.LONG, -1L, ConfigDef.Importance.LOW,
            "pause the assignment at start, resume it at this flush")
        .define("report.at", ConfigDef.Type.LONG, -1L, ConfigDef.Importance.LOW,
            "report the record at this offset to the errant record reporter")
        .define("jvm.report", ConfigDef.Type.BOOLEAN, false, ConfigDef.Importance.LOW,
            "write the JVM's max memory and the wharf.test.marker property at start");
  }
  @Override public String version() { return "1.0"; }
}
