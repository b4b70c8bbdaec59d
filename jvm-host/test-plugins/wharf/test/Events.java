package wharf.test;

import java.io.FileWriter;
import java.io.IOException;
import java.util.Map;

/** Appends what a test plugin was called with to the file its config names. */
final class Events {
  static void write(Map<String, String> config, String line) {
    try (FileWriter w = new FileWriter(config.get("events.file"), true)) {
      w.write(line + "\n");
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
  }

  private Events() {}
}
