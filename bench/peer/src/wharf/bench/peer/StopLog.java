package wharf.bench.peer;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

/**
 * The lifecycle file the bench reads: one line per event, appended with a single write
 * (O_APPEND), so lines from many task threads do not interleave.
 *
 * <p>Line shape, tab-separated: {@code <unix time, microseconds> <event> <connector> <task>
 * <detail>}; event is one of connector-start, connector-stop, task-start (detail: the
 * offset the task read at start as JSON, or "none"), task-stop. Task is -1 for the
 * connector's own events.
 */
final class StopLog {
    private StopLog() {}

    /** Appends one event line to {@code path}; a failure fails the caller (the bench then sees no line). */
    static void append(String path, String event, String connector, int task, String detail) {
        long micros = ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
        String line = micros + "\t" + event + "\t" + connector + "\t" + task + "\t" + detail + "\n";
        Path p = Paths.get(path);
        try {
            Files.write(p, line.getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND, StandardOpenOption.WRITE);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
