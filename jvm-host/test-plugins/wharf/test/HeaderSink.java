package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

/** A test sink whose task writes the headers it is given (HeaderSinkTask). */
public class HeaderSink extends SinkConnector {
  Map<String, String> config;

  @Override public void start(Map<String, String> props) { config = props; }
  @Override public Class<? extends Task> taskClass() { return HeaderSinkTask.class; }
  @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(config); }
  @Override public void stop() {}
  @Override public ConfigDef config() {
    return new ConfigDef().define("events.file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "where the headers are written");
  }
  @Override public String version() { return "1.0"; }
}
