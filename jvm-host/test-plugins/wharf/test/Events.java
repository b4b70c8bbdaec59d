package wharf.test;

import java.io.FileWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/** Appends what a test plugin was called with to the file its config names, in UTF-8. */
final class Events {
  static void write(Map<String, String> config, String line) {
    try (FileWriter w = new FileWriter(config.get("events.file"), StandardCharsets.UTF_8, true)) {
      w.write(line + "\n");
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
  }

  /**
   * Waits (at most a minute) until the file named by stop.gate.file exists, when the config
   * names one: a test holds a stop there to look at a deletion in progress.
   */
  static void gate(Map<String, String> config) {
    String gate = config.get("stop.gate.file");
    if (gate == null || gate.isEmpty()) return;
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (!new java.io.File(gate).exists() && System.nanoTime() < deadline) {
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  private Events() {}
}
