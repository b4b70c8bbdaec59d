package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/**
 * Emits two records with headers on its first poll, nothing after: a string and an int32
 * header on each, and on the second a non-ASCII string, a repeated key and a null value.
 */
public class HeaderSourceTask extends SourceTask {
  String topic;
  boolean done;

  @Override public String version() { return "1.0"; }
  @Override public void start(Map<String, String> props) { topic = props.get("topic"); }

  @Override public List<SourceRecord> poll() throws InterruptedException {
    if (done) {
      Thread.sleep(50);
      return null;
    }
    done = true;
    ConnectHeaders first = new ConnectHeaders();
    first.addString("trace", "abc-123");
    first.addInt("attempt", 42);
    ConnectHeaders second = new ConnectHeaders();
    second.addString("trace", "h\u00e9llo \u2713");
    second.addInt("attempt", -7);
    second.addString("tag", "a");
    second.addString("tag", "b");
    second.add("nothing", SchemaAndValue.NULL);
    Map<String, ?> partition = Map.of("source", "headers");
    return List.of(
        new SourceRecord(partition, Map.of("n", 1), topic, null, null, null, Schema.STRING_SCHEMA, "one", null, first),
        new SourceRecord(partition, Map.of("n", 2), topic, null, null, null, Schema.STRING_SCHEMA, "two", null, second));
  }

  @Override public void stop() {}
}
