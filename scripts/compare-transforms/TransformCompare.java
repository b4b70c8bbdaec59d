// Applies Apache Kafka Connect's own transforms and predicates (connect-transforms 3.9)
// to the records of each case in a cases file, as a sink's pipeline does: JsonConverter
// (schemas.enable=false) reads key and value, the chain runs (predicate, negate), the
// converters write the result. Prints one JSON line per case: {"case", "out": [...]},
// each output record {topic, key, value, headers, timestamp} or the error's text.
// The Wharf side of the comparison is the `pipeline_apply` example of wharf-executor;
// scripts/compare-transforms compares the two outputs.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.transforms.Transformation;
import org.apache.kafka.connect.transforms.predicates.Predicate;

public class TransformCompare {
    static final ObjectMapper M = new ObjectMapper();

    static Map<String, String> under(Map<String, String> cfg, String prefix) {
        Map<String, String> out = new HashMap<>();
        for (Map.Entry<String, String> e : cfg.entrySet()) {
            if (e.getKey().startsWith(prefix)) out.put(e.getKey().substring(prefix.length()), e.getValue());
        }
        return out;
    }

    static List<String> list(String v) {
        List<String> out = new ArrayList<>();
        if (v == null || v.trim().isEmpty()) return out;
        for (String s : v.split(",")) out.add(s.trim());
        return out;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    public static void main(String[] args) throws Exception {
        JsonNode cases = M.readTree(new File(args[0]));
        for (JsonNode c : cases) {
            Map<String, String> cfg = new HashMap<>();
            Iterator<Map.Entry<String, JsonNode>> it = c.get("config").fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                cfg.put(e.getKey(), e.getValue().asText());
            }
            ObjectNode line = M.createObjectNode();
            line.put("case", c.get("name").asText());
            ArrayNode out = line.putArray("out");
            JsonConverter keyConv = new JsonConverter();
            keyConv.configure(Map.of("schemas.enable", "false"), true);
            JsonConverter valueConv = new JsonConverter();
            valueConv.configure(Map.of("schemas.enable", "false"), false);
            SimpleHeaderConverter headerConv = new SimpleHeaderConverter();
            Map<String, Predicate> predicates = new HashMap<>();
            List<Object[]> chain = new ArrayList<>();
            try {
                for (String alias : list(cfg.get("predicates"))) {
                    Map<String, String> own = under(cfg, "predicates." + alias + ".");
                    Predicate p = (Predicate) Class.forName(own.remove("type")).getDeclaredConstructor().newInstance();
                    p.configure(own);
                    predicates.put(alias, p);
                }
                for (String alias : list(cfg.get("transforms"))) {
                    Map<String, String> own = under(cfg, "transforms." + alias + ".");
                    Transformation t = (Transformation) Class.forName(own.remove("type")).getDeclaredConstructor().newInstance();
                    String pred = own.remove("predicate");
                    boolean negate = Boolean.parseBoolean(own.remove("negate"));
                    t.configure(own);
                    chain.add(new Object[] {t, pred == null ? null : predicates.get(pred), negate});
                }
            } catch (Throwable e) {
                line.put("config_error", true);
                System.out.println(M.writeValueAsString(line));
                continue;
            }
            long offset = 0;
            for (JsonNode r : c.get("records")) {
                ObjectNode o = out.addObject();
                try {
                    String topic = r.get("topic").asText();
                    byte[] key = r.get("key").isNull() ? null : r.get("key").asText().getBytes(StandardCharsets.UTF_8);
                    byte[] value = r.get("value").isNull() ? null : r.get("value").asText().getBytes(StandardCharsets.UTF_8);
                    SchemaAndValue k = keyConv.toConnectData(topic, key);
                    SchemaAndValue v = valueConv.toConnectData(topic, value);
                    ConnectHeaders headers = new ConnectHeaders();
                    for (JsonNode h : r.get("headers")) {
                        String hk = h.get(0).asText();
                        headers.add(hk, headerConv.toConnectHeader(topic, hk, h.get(1).asText().getBytes(StandardCharsets.UTF_8)));
                    }
                    Long ts = r.get("timestamp").isNull() ? null : r.get("timestamp").asLong();
                    SinkRecord rec = new SinkRecord(topic, 0, k.schema(), k.value(), v.schema(), v.value(), offset++, ts, TimestampType.CREATE_TIME, headers);
                    for (Object[] step : chain) {
                        if (rec == null) break;
                        Predicate p = (Predicate) step[1];
                        if (p != null && p.test(rec) == (Boolean) step[2]) continue;
                        rec = (SinkRecord) ((Transformation) step[0]).apply(rec);
                    }
                    if (rec == null) {
                        o.put("dropped", true);
                        continue;
                    }
                    o.put("topic", rec.topic());
                    byte[] kb = keyConv.fromConnectData(rec.topic(), rec.keySchema(), rec.key());
                    byte[] vb = valueConv.fromConnectData(rec.topic(), rec.valueSchema(), rec.value());
                    o.put("key", kb == null ? null : new String(kb, StandardCharsets.UTF_8));
                    o.put("value", vb == null ? null : new String(vb, StandardCharsets.UTF_8));
                    ArrayNode hs = o.putArray("headers");
                    for (Header h : rec.headers()) {
                        byte[] hb = headerConv.fromConnectHeader(rec.topic(), h.key(), h.schema(), h.value());
                        hs.addArray().add(h.key()).add(hb == null ? null : new String(hb, StandardCharsets.UTF_8));
                    }
                    if (rec.timestamp() == null) o.putNull("timestamp"); else o.put("timestamp", rec.timestamp());
                } catch (Throwable e) {
                    o.put("error", true);
                }
            }
            System.out.println(M.writeValueAsString(line));
        }
    }
}
