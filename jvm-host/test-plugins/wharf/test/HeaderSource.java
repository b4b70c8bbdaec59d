package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.source.SourceConnector;

/** A test source whose task emits records with Connect headers (HeaderSourceTask). */
public class HeaderSource extends SourceConnector {
  Map<String, String> config;

  @Override public void start(Map<String, String> props) { config = props; }
  @Override public Class<? extends Task> taskClass() { return HeaderSourceTask.class; }
  @Override public List<Map<String, String>> taskConfigs(int max) { return List.of(config); }
  @Override public void stop() {}
  @Override public ConfigDef config() {
    return new ConfigDef().define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the topic to write to");
  }
  @Override public String version() { return "1.0"; }
}
