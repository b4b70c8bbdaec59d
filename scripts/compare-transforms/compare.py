"""Compares the outputs of Kafka Connect's transforms (TransformCompare.java) and Wharf's
(the pipeline_apply example) case by case: topic, key, value, headers, timestamp; keys,
values and header texts compared as parsed JSON when they parse (Connect's schemaless
maps have no meaningful key order), a drop or an error only as such. Prints a line per
case and exits 1 on any difference."""
import json
import sys


def parsed(text):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def norm(rec):
    if rec.get("dropped") or rec.get("error"):
        return {k: True for k in ("dropped", "error") if rec.get(k)}
    return {
        "topic": rec["topic"],
        "key": parsed(rec["key"]),
        "value": parsed(rec["value"]),
        "headers": [[h[0], parsed(h[1])] for h in rec["headers"]],
        "timestamp": rec["timestamp"],
    }


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                c = json.loads(line)
                out[c["case"]] = c
    return out


connect, wharf = load(sys.argv[1]), load(sys.argv[2])
failed = 0
for name, c in connect.items():
    w = wharf.get(name)
    if w is None:
        print(f"{name}: missing on Wharf's side")
        failed += 1
        continue
    if c.get("config_error") or w.get("config_error"):
        same = bool(c.get("config_error")) == bool(w.get("config_error"))
    else:
        same = [norm(r) for r in c["out"]] == [norm(r) for r in w["out"]]
    if same:
        print(f"{name}: same")
    else:
        failed += 1
        print(f"{name}: DIFFERENT\n  Connect: {json.dumps(c)}\n  Wharf:   {json.dumps(w)}")
print(f"compare-transforms: {len(connect) - failed} cases the same as Kafka Connect, {failed} different")
sys.exit(1 if failed else 0)
