package wharf.host;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.storage.Converter;
import org.apache.kafka.connect.storage.ConverterConfig;
import org.apache.kafka.connect.storage.ConverterType;
import org.apache.kafka.connect.storage.HeaderConverter;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

/**
 * A connector's key and value converters, as Kafka Connect makes them from the connector's
 * config: key.converter / value.converter name the class (JsonConverter when unset, Connect's
 * usual worker default, with its own default schemas.enable=true), configured with the
 * key.converter.* / value.converter.* keys, prefix removed. The executor's record pipeline
 * takes the bytes as written in these converters' format (docs/pipeline.md), so a record is
 * converted once, here.
 *
 * <p>Headers likewise: header.converter names a HeaderConverter (SimpleHeaderConverter when
 * unset, Connect's worker default), configured with the header.converter.* keys and, as
 * Connect's worker adds it, converter.type=header.
 */
final class Converters {
  static final String DEFAULT = JsonConverter.class.getName();
  static final String DEFAULT_HEADERS = SimpleHeaderConverter.class.getName();

  final Converter keys;
  final Converter values;
  final HeaderConverter headers;

  private Converters(Converter keys, Converter values, HeaderConverter headers) {
    this.keys = keys;
    this.values = values;
    this.headers = headers;
  }

  /** The converters `config` asks for, loaded through the context class loader. */
  static Converters of(Map<String, String> config) throws Exception {
    return new Converters(make(config, "key", true), make(config, "value", false), headers(config));
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
    Converter converter =
        (Converter) instance(config, key, DEFAULT, Converter.class, "Kafka Connect Converter");
    converter.configure(options(config, key + "."), isKey);
    return converter;
  }

  /** The connector's header.converter, configured as Connect's worker configures it. */
  static HeaderConverter headers(Map<String, String> config) throws Exception {
    String key = "header.converter";
    HeaderConverter converter = (HeaderConverter)
        instance(config, key, DEFAULT_HEADERS, HeaderConverter.class, "Kafka Connect HeaderConverter");
    Map<String, String> options = options(config, key + ".");
    // A class that is both a Converter and a HeaderConverter (JsonConverter) learns its
    // role from this key, as it does in a Connect worker.
    options.put(ConverterConfig.TYPE_CONFIG, ConverterType.HEADER.getName());
    converter.configure(options);
    return converter;
  }

  /**
   * The class a converter name stands for: Wharf's short names and the simple names of
   * Connect's own converters (those the executor's --key-converter, --value-converter and
   * --header-converter accept), else the name itself.
   */
  static String className(String name) {
    switch (name) {
      case "json": case "JsonConverter": return "org.apache.kafka.connect.json.JsonConverter";
      case "string": case "StringConverter": return "org.apache.kafka.connect.storage.StringConverter";
      case "bytes": case "bytearray": case "ByteArrayConverter":
        return "org.apache.kafka.connect.converters.ByteArrayConverter";
      case "simple": case "SimpleHeaderConverter": return DEFAULT_HEADERS;
      default: return name;
    }
  }

  /** A new instance of the class config[key] names (`fallback` when unset), of type `type`. */
  static Object instance(Map<String, String> config, String key, String fallback, Class<?> type,
      String what) throws Exception {
    String name = className(config.getOrDefault(key, "").trim());
    if (name.isEmpty()) name = fallback;
    Class<?> c;
    try {
      c = Class.forName(name, true, Thread.currentThread().getContextClassLoader());
    } catch (ClassNotFoundException e) {
      throw new IllegalArgumentException("config[" + key + "]: class " + name + " could not be found");
    }
    if (!type.isAssignableFrom(c)) {
      throw new IllegalArgumentException("config[" + key + "]: " + name + " is not a " + what);
    }
    return c.getDeclaredConstructor().newInstance();
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
