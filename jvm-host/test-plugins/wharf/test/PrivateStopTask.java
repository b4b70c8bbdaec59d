package wharf.test;

import java.util.List;
import java.util.Map;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/** A test task. */
public class PrivateStopTask extends SourceTask {
  Map<String, String> config;

  @Override public String version() { return "1.0"; }
  @Override public void start(Map<String, String> props) { config = props; Events.write(config, "task start"); }
  @Override public List<SourceRecord> poll() throws InterruptedException { Thread.sleep(50); return null; }
  protected void stop(boolean deleted) { Events.write(config, "task protected stop(" + deleted + ")"); }
  @Override public void stop() { Events.write(config, "task stop()"); }
}
