package wharf.bench.peer;

import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/**
 * A task of {@link NoopSourceConnector}: records its start (with the offset Kafka Connect
 * hands it for its partition {@code {"task": N}}) and its {@code stop()}, and produces
 * nothing.
 */
public class NoopSourceTask extends SourceTask {
    private final CountDownLatch stopped = new CountDownLatch(1);
    private String log;
    private String connector;
    private int task;
    private long pollBlockMs;

    @Override
    public void start(Map<String, String> props) {
        log = props.get(NoopSourceConnector.STOP_LOG);
        connector = props.getOrDefault("name", "?");
        task = Integer.parseInt(props.getOrDefault(NoopSourceConnector.TASK_ID, "0"));
        pollBlockMs = Long.parseLong(props.getOrDefault(NoopSourceConnector.POLL_BLOCK_MS, "1000"));
        Map<String, Object> offset =
                context.offsetStorageReader().offset(Collections.singletonMap("task", task));
        StopLog.append(log, "task-start", connector, task, offset == null ? "none" : json(offset));
    }

    @Override
    public List<SourceRecord> poll() throws InterruptedException {
        stopped.await(pollBlockMs, TimeUnit.MILLISECONDS);
        return null;
    }

    @Override
    public void stop() {
        StopLog.append(log, "task-stop", connector, task, "-");
        stopped.countDown();
    }

    @Override
    public String version() {
        return "0.1.0";
    }

    /** A flat map as JSON (the offsets here are small maps of numbers and strings). */
    private static String json(Map<String, Object> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, Object> e : new java.util.TreeMap<>(m).entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append('"').append(e.getKey()).append("\":");
            Object v = e.getValue();
            if (v instanceof Number || v instanceof Boolean) {
                b.append(v);
            } else {
                b.append('"').append(v).append('"');
            }
        }
        return b.append('}').toString();
    }
}
