package wharf.host;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.storage.Converter;

/**
 * A connector's key and value converters, as Kafka Connect makes them from the connector's
 * config: key.converter / value.converter name the class (JsonConverter when unset, Connect's
 * usual worker default, with its own default schemas.enable=true), configured with the
 * key.converter.* / value.converter.* keys, prefix removed. The executor's record pipeline
 * takes the bytes as written in these converters' format (docs/pipeline.md), so a record is
 * converted once, here.
 */
final class Converters {
  static final String DEFAULT = JsonConverter.class.getName();

  final Converter keys;
  final Converter values;

  private Converters(Converter keys, Converter values) {
    this.keys = keys;
    this.values = values;
  }

  /** The converters `config` asks for, loaded through the context class loader. */
  static Converters of(Map<String, String> config) throws Exception {
    return new Converters(make(config, "key", true), make(config, "value", false));
  }

  /** Connect's default converters (JsonConverter with schemas). */
  static Converters json() {
    try {
      return of(Map.of());
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  static Converter make(Map<String, String> config, String which, boolean isKey) throws Exception {
    String key = which + ".converter";
    String name = config.getOrDefault(key, "").trim();
    if (name.isEmpty()) name = DEFAULT;
    Class<?> c;
    try {
      c = Class.forName(name, true, Thread.currentThread().getContextClassLoader());
    } catch (ClassNotFoundException e) {
      throw new IllegalArgumentException("config[" + key + "]: class " + name + " could not be found");
    }
    if (!Converter.class.isAssignableFrom(c)) {
      throw new IllegalArgumentException("config[" + key + "]: " + name + " is not a Kafka Connect Converter");
    }
    Converter converter = (Converter) c.getDeclaredConstructor().newInstance();
    converter.configure(options(config, key + "."), isKey);
    return converter;
  }

  /** The keys under `prefix`, prefix removed. */
  static Map<String, String> options(Map<String, String> config, String prefix) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, String> e : config.entrySet()) {
      if (e.getKey().startsWith(prefix)) out.put(e.getKey().substring(prefix.length()), e.getValue());
    }
    return out;
  }
}
