package wharf.test;

import java.util.Collection;
import java.util.Map;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/**
 * Writes one line per header of every record it is put, in order, to events.file:
 * "OFFSET KEY=VALUE (SCHEMA TYPE, JAVA CLASS)", as the Connect data the task received.
 */
public class HeaderSinkTask extends SinkTask {
  Map<String, String> config;

  @Override public String version() { return "1.0"; }
  @Override public void start(Map<String, String> props) { config = props; }

  @Override public void put(Collection<SinkRecord> records) {
    for (SinkRecord r : records) {
      for (Header h : r.headers()) {
        String type = h.schema() == null ? "no schema" : h.schema().type().toString();
        String cls = h.value() == null ? "null" : h.value().getClass().getSimpleName();
        Events.write(config, r.kafkaOffset() + " " + h.key() + "=" + h.value() + " (" + type + ", " + cls + ")");
      }
    }
  }

  @Override public void stop() {}
}
