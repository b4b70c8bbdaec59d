package wharf.bench.peer;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.source.SourceConnector;

/**
 * A source connector for the Wharf bench's Kafka Connect peer: its tasks produce nothing
 * and record when they start and when {@code stop()} runs (see {@link StopLog}), the
 * Kafka Connect side of Wharf's idle {@code test-source}.
 *
 * <p>Config: {@code stop.log} (path of the lifecycle file, required), {@code poll.block.ms}
 * (how long one {@code poll()} waits before it returns nothing, default 1000; Kafka
 * Connect calls a source task's {@code stop()} on the task thread once the poll in
 * progress returned, so this bounds how late a stop can run), {@code tasks.max}.
 */
public class NoopSourceConnector extends SourceConnector {
    /** Path of the lifecycle file. */
    public static final String STOP_LOG = "stop.log";
    /** Milliseconds one poll waits before it returns nothing. */
    public static final String POLL_BLOCK_MS = "poll.block.ms";
    /** Set in each task's config: its index. */
    public static final String TASK_ID = "bench.task.id";

    static final ConfigDef CONFIG = new ConfigDef()
            .define(STOP_LOG, ConfigDef.Type.STRING, ConfigDef.Importance.HIGH,
                    "Path of the lifecycle file the bench reads")
            .define(POLL_BLOCK_MS, ConfigDef.Type.LONG, 1000L, ConfigDef.Importance.LOW,
                    "Milliseconds one poll waits before it returns nothing");

    private Map<String, String> props;
    private String name;

    @Override
    public void start(Map<String, String> props) {
        this.props = new HashMap<>(props);
        this.name = props.getOrDefault("name", "?");
        CONFIG.parse(props);
        StopLog.append(props.get(STOP_LOG), "connector-start", name, -1, "-");
    }

    @Override
    public Class<? extends Task> taskClass() {
        return NoopSourceTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        List<Map<String, String>> out = new ArrayList<>(maxTasks);
        for (int i = 0; i < maxTasks; i++) {
            Map<String, String> c = new HashMap<>(props);
            c.put(TASK_ID, Integer.toString(i));
            out.add(c);
        }
        return out;
    }

    @Override
    public void stop() {
        StopLog.append(props.get(STOP_LOG), "connector-stop", name, -1, "-");
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public String version() {
        return "0.1.0";
    }

    /** Offsets may be altered through the REST API (KIP-875): they live only in Connect's offset topic. */
    @Override
    public boolean alterOffsets(Map<String, String> connectorConfig,
                                Map<Map<String, ?>, Map<String, ?>> offsets) {
        return true;
    }
}
