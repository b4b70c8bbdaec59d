package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.source.SourceConnector;

/** A test connector (see PlainTask for its stop). */
public class PlainSource extends SourceConnector {
  Map<String, String> config;

  @Override public void start(Map<String, String> props) { config = props; Events.write(config, "connector start"); }
  @Override public Class<? extends Task> taskClass() { return PlainTask.class; }
  @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(config); }
  @Override public void stop() { Events.write(config, "connector stop()"); Events.gate(config); }
  @Override public ConfigDef config() {
    return new ConfigDef().define("events.file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "where calls are written")
        .define("stop.gate.file", ConfigDef.Type.STRING, "", ConfigDef.Importance.LOW, "stop() waits until this file exists");
  }
  @Override public String version() { return "1.0"; }
}
