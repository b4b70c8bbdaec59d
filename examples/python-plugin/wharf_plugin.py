"""A Wharf plugin in Python, without any library: the plugin protocol
(proto/wharf/v1/plugin.proto, docs/plugins-out-of-process.md) over stdin/stdout, with a
hand-written protobuf encoding of the few messages it needs.

A plugin defines classes with the SDK's calls and hands them to `serve`:

    class MyConnector:
        @staticmethod
        def validate(config): return {"key": ["what is wrong"]}   # optional
        def start(self, ctx, config): ...
        def task_configs(self, max_tasks): return [{}]
        def stop(self, connector_deleted): ...

    class MyTask:                         # a source task; a sink has put/flush instead
        def start(self, ctx, config): ...
        def poll(self): return [Record(topic="t", value=b"x", partition={}, offset={})]
        def commit(self): ...
        def stop(self, connector_deleted): ...

    serve([PluginDef("my-source", "1.0", "source", MyConnector, MyTask, config=[...])])

What an instance provisions outside goes into its connector's resource ledger
(docs/resources.md) through its context, before it is created and after:

    r = Resource("table", "audit", locator={"host": "db:5432", "database": "app"})
    ctx.resources.intend(r)      # raises when refused (another connector holds it)
    create_table()
    ctx.resources.confirm(r)
    # in stop(True), once removed: ctx.resources.release(r) (or .absent(r) if gone)

Each instance runs its calls in a thread of its own, in order, so that one instance's
blocking poll never delays another's stop. An exception in a call answers it with an
error whose text is the exception's. stdout carries only frames: log to stderr.
"""

import json
import os
import queue
import struct
import sys
import threading

PROTOCOL_VERSION = 1

# ---- protobuf wire format (varints and length-delimited fields only) -------------


def _varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_int(num, value):
    """A varint field (uint32/uint64/int64/bool/enum); zero is left out as proto3 does."""
    if not value:
        return b""
    return _varint(num << 3) + _varint(int(value))


def f_bytes(num, value, always=False):
    """A length-delimited field (string, bytes, message)."""
    if isinstance(value, str):
        value = value.encode()
    if not value and not always:
        return b""
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def f_map(num, mapping):
    """A map<string, string> field: one entry message per pair."""
    return b"".join(
        f_bytes(num, f_bytes(1, k) + f_bytes(2, v), always=True) for k, v in mapping.items()
    )


def decode(buf):
    """The fields of a message: {field number: [values]}, a value being an int (varint)
    or bytes (length-delimited)."""
    fields, i = {}, 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            n, i = _read_varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        fields.setdefault(num, []).append(value)
    return fields


def _read_varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def g_int(f, num):
    return f.get(num, [0])[-1]


def g_str(f, num):
    return bytes(f.get(num, [b""])[-1]).decode()


def g_bytes(f, num):
    return bytes(f.get(num, [b""])[-1])


def g_map(f, num):
    out = {}
    for entry in f.get(num, []):
        e = decode(entry)
        out[g_str(e, 1)] = g_str(e, 2)
    return out


# ---- messages -------------------------------------------------------------------

# RuntimeToPlugin body fields.
DESCRIBE, CONNECTOR_START, CONNECTOR_TASK_CONFIGS, CONNECTOR_VALIDATE = 2, 3, 4, 5
CONNECTOR_STOP, TASK_START, TASK_POLL, TASK_COMMIT, TASK_PUT = 6, 7, 8, 9, 10
TASK_FLUSH, TASK_STOP, CANCEL, RELEASE, OFFSETS_ANSWER = 11, 12, 13, 14, 15
RECORD_ANSWER = 16
# PluginToRuntime body fields.
A_DESCRIBE, A_ERROR, A_OK, A_TASK_CONFIGS, A_VALIDATE, A_POLL = 2, 3, 4, 5, 6, 7
R_READ_OFFSETS, R_RECONFIGURE, R_RAISE_ERROR, R_RECORD_RESOURCES = 8, 9, 10, 11
# wharf.v1.ResourceChange and wharf.v1.ResourceOrigin values.
INTENT, CONFIRM, RELEASE_CHANGE, ABSENT = 1, 2, 3, 4
ORIGINS = {"created": 1, "adopted": 2}

CONFIG_TYPES = {"string": 1, "int": 2, "long": 3, "boolean": 4, "list": 5, "password": 6, "double": 7}
IMPORTANCE = {"high": 1, "medium": 2, "low": 3}


class ConfigKey:
    """One config key of a plugin (wharf.v1.ConfigKeyDef)."""

    def __init__(self, name, type="string", documentation="", default=None, required=False,
                 importance="medium", secret=False, allowed=()):
        self.name, self.type, self.documentation = name, type, documentation
        self.default, self.required, self.importance = default, required, importance
        self.secret, self.allowed = secret, list(allowed)

    def encode(self):
        out = f_bytes(1, self.name) + f_int(2, CONFIG_TYPES[self.type])
        if self.default is not None:
            out += f_bytes(3, self.default, always=True)
        out += f_int(4, IMPORTANCE[self.importance]) + f_bytes(5, self.documentation)
        out += f_int(6, self.secret) + f_int(7, self.required)
        out += b"".join(f_bytes(8, v, always=True) for v in self.allowed)
        return out


class PluginDef:
    """A plugin the process offers: `kind` is "source" or "sink"; `connector` and `task`
    make fresh instances."""

    def __init__(self, name, version, kind, connector, task, config=()):
        self.name, self.version, self.kind = name, version, kind
        self.connector, self.task, self.config = connector, task, list(config)

    def encode(self):
        kind = {"source": 1, "sink": 2}[self.kind]
        return (f_bytes(1, self.name) + f_bytes(2, self.version) + f_int(3, kind)
                + b"".join(f_bytes(4, k.encode(), always=True) for k in self.config))


class Record:
    """A source record: partition and offset are JSON-able objects."""

    def __init__(self, topic, value, partition, offset, key=None, headers=(), timestamp_ms=None):
        self.topic, self.value, self.key = topic, value, key
        self.partition, self.offset = partition, offset
        self.headers, self.timestamp_ms = list(headers), timestamp_ms

    def encode(self):
        value = self.value.encode() if isinstance(self.value, str) else self.value
        out = f_bytes(1, self.topic)
        if self.key is not None:
            out += f_bytes(2, self.key, always=True)
        out += f_bytes(3, value)
        out += b"".join(f_bytes(4, f_bytes(1, k) + f_bytes(2, v), always=True) for k, v in self.headers)
        if self.timestamp_ms is not None:
            out += _varint(5 << 3) + _varint(self.timestamp_ms)
        out += f_bytes(6, json.dumps(self.partition, sort_keys=True), always=True)
        out += f_bytes(7, json.dumps(self.offset, sort_keys=True), always=True)
        return out


class Resource:
    """An external resource (wharf.v1.Resource): a lowercase kind ("table", "queue",
    "file", or another [a-z0-9_] name), its name, where it lives (`locator`: host,
    database, vhost, path; never a secret) and whether this incarnation creates it
    ("created": a deletion removes it) or only uses what was there ("adopted")."""

    def __init__(self, kind, name, locator=None, origin="created"):
        self.kind, self.name, self.origin = kind, name, origin
        self.locator = dict(locator or {})

    def encode(self):
        loc = self.locator
        locator = (f_bytes(1, loc.get("host", "")) + f_bytes(2, loc.get("database", ""))
                   + f_bytes(3, loc.get("vhost", "")) + f_bytes(4, loc.get("path", "")))
        return (f_bytes(1, self.kind) + f_bytes(2, self.name) + f_bytes(3, locator, always=True)
                + f_int(4, ORIGINS[self.origin]))

    def __repr__(self):
        return "%s %s (%s)" % (self.kind, self.name, self.locator)


class LedgerRefused(Exception):
    """The runtime did not record a ledger change; the text says why."""


class Resources:
    """An instance's handle on its connector's resource ledger: each call returns once
    the control plane stored the change, and raises LedgerRefused otherwise."""

    def __init__(self, server, instance_id):
        self._server, self._id = server, instance_id

    def _record(self, resource, change):
        rid, event = self._server.next_id(), threading.Event()
        self._server.waiting[rid] = [event, None]
        body = f_int(1, self._id) + f_bytes(2, resource.encode(), always=True) + f_int(3, change)
        _send(rid, R_RECORD_RESOURCES, body)
        event.wait()
        error = g_str(self._server.waiting.pop(rid)[1], 1)
        if error:
            raise LedgerRefused(error)

    def intend(self, resource):
        """Before creating (or adopting) it: must not be created when this raises."""
        self._record(resource, INTENT)

    def confirm(self, resource):
        """It exists now."""
        self._record(resource, CONFIRM)

    def release(self, resource):
        """A stop with connector_deleted = True removed it."""
        self._record(resource, RELEASE_CHANGE)

    def absent(self, resource):
        """Checked: it is not there (removed already)."""
        self._record(resource, ABSENT)


class SinkRecord:
    """A record given to a sink task's put."""

    def __init__(self, f):
        self.topic = g_str(f, 1)
        self.key = bytes(f[2][-1]) if 2 in f else None
        self.value = g_bytes(f, 3)
        self.offset = g_int(f, 6)


# ---- the server -----------------------------------------------------------------

_out_lock = threading.Lock()


def _send(request_id, field, body):
    msg = f_int(1, request_id) + f_bytes(field, body, always=True)
    with _out_lock:
        sys.stdout.buffer.write(struct.pack(">I", len(msg)) + msg)
        sys.stdout.buffer.flush()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Context:
    """What an instance is started with, and its ways back to the runtime."""

    def __init__(self, server, instance_id, f, task):
        self._server, self._id = server, instance_id
        if task:
            self.connector, self.task = g_str(f, 3), g_int(f, 4)
            self.incarnation, self.cleanup_only = g_str(f, 5), bool(g_int(f, 6))
            self.executor_id = g_str(f, 7)
            self.connector_config = g_map(f, 8)
            self.offsets = {}
            for o in f.get(10, []):
                so = decode(o)
                self.offsets[g_str(so, 1)] = json.loads(g_str(so, 2))
        else:
            self.connector, self.incarnation = g_str(f, 3), g_str(f, 4)
            self.cleanup_only, self.executor_id = bool(g_int(f, 5)), g_str(f, 6)
        self.resources = Resources(server, instance_id)

    def request_task_reconfiguration(self):
        _send(self._server.next_id(), R_RECONFIGURE, f_int(1, self._id))

    def raise_error(self, message):
        _send(self._server.next_id(), R_RAISE_ERROR, f_int(1, self._id) + f_bytes(2, message))

    def read_offsets(self, partitions):
        """Committed offsets of source partitions (JSON-able objects), as the runtime
        holds them: {json text of partition: offset}."""
        rid, event = self._server.next_id(), threading.Event()
        self._server.waiting[rid] = [event, None]
        body = f_int(1, self._id) + b"".join(
            f_bytes(2, json.dumps(p, sort_keys=True), always=True) for p in partitions)
        _send(rid, R_READ_OFFSETS, body)
        event.wait()
        answer = self._server.waiting.pop(rid)[1]
        out = {}
        for o in answer.get(1, []):
            so = decode(o)
            out[g_str(so, 1)] = json.loads(g_str(so, 2))
        return out


class _Instance:
    def __init__(self):
        self.calls = queue.Queue()
        self.obj = None
        self.released = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            job = self.calls.get()
            if job is None or self.released:
                return
            request_id, fn = job
            try:
                field, body = fn()
            except Exception as e:  # the call failed: its text is the instance's error
                field, body = A_ERROR, f_bytes(1, str(e) or type(e).__name__)
            _send(request_id, field, body)


class Server:
    def __init__(self, plugins):
        self.plugins = {p.name: p for p in plugins}
        self.order = list(plugins)
        self.instances = {}
        self.waiting = {}
        self._ids = iter(range(1, 1 << 62))
        self._id_lock = threading.Lock()

    def next_id(self):
        with self._id_lock:
            return next(self._ids)

    def _enqueue(self, instance_id, request_id, fn):
        inst = self.instances.get(instance_id)
        if inst is None:
            _send(request_id, A_ERROR, f_bytes(1, "no instance %d in this process" % instance_id))
            return
        inst.calls.put((request_id, fn))

    def handle(self, msg):
        f = decode(msg)
        rid = g_int(f, 1)
        if DESCRIBE in f:
            body = f_int(1, PROTOCOL_VERSION) + b"".join(
                f_bytes(2, p.encode(), always=True) for p in self.order)
            _send(rid, A_DESCRIBE, body)
        elif CONNECTOR_START in f or TASK_START in f:
            task = TASK_START in f
            b = decode(f[TASK_START if task else CONNECTOR_START][-1])
            iid, plugin = g_int(b, 1), self.plugins.get(g_str(b, 2))
            inst = self.instances[iid] = _Instance()

            def start():
                if plugin is None:
                    raise ValueError("no plugin %r in this process" % g_str(b, 2))
                ctx = Context(self, iid, b, task)
                inst.obj = plugin.task() if task else plugin.connector()
                inst.obj.start(ctx, g_map(b, 9) if task else g_map(b, 7))
                return A_OK, b""
            inst.calls.put((rid, start))
        elif CONNECTOR_TASK_CONFIGS in f:
            b = decode(f[CONNECTOR_TASK_CONFIGS][-1])
            iid, max_tasks = g_int(b, 1), g_int(b, 2)

            def configs():
                out = self.instances[iid].obj.task_configs(max_tasks)
                return A_TASK_CONFIGS, b"".join(f_bytes(1, f_map(1, c), always=True) for c in out)
            self._enqueue(iid, rid, configs)
        elif CONNECTOR_VALIDATE in f:
            b = decode(f[CONNECTOR_VALIDATE][-1])
            plugin, config = self.plugins.get(g_str(b, 1)), g_map(b, 2)

            def validate():
                try:
                    check = getattr(plugin.connector, "validate", None) if plugin else None
                    found = check(config) if check else {}
                    body = b"".join(
                        f_bytes(1, f_bytes(1, k) + b"".join(f_bytes(2, m, always=True) for m in ms),
                                always=True)
                        for k, ms in found.items() if ms)
                    _send(rid, A_VALIDATE, body)
                except Exception as e:
                    _send(rid, A_ERROR, f_bytes(1, str(e) or type(e).__name__))
            threading.Thread(target=validate, daemon=True).start()
        elif CONNECTOR_STOP in f or TASK_STOP in f:
            b = decode(f[CONNECTOR_STOP if CONNECTOR_STOP in f else TASK_STOP][-1])
            iid, deleted = g_int(b, 1), bool(g_int(b, 2))

            def stop():
                inst = self.instances.pop(iid)
                if inst.obj is not None:
                    inst.obj.stop(deleted)
                inst.calls.put(None)
                return A_OK, b""
            self._enqueue(iid, rid, stop)
        elif TASK_POLL in f:
            iid = g_int(decode(f[TASK_POLL][-1]), 1)

            def poll():
                records = self.instances[iid].obj.poll() or []
                return A_POLL, b"".join(f_bytes(1, r.encode(), always=True) for r in records)
            self._enqueue(iid, rid, poll)
        elif TASK_COMMIT in f:
            iid = g_int(decode(f[TASK_COMMIT][-1]), 1)

            def commit():
                getattr(self.instances[iid].obj, "commit", lambda: None)()
                return A_OK, b""
            self._enqueue(iid, rid, commit)
        elif TASK_PUT in f:
            b = decode(f[TASK_PUT][-1])
            iid = g_int(b, 1)
            records = [SinkRecord(decode(r)) for r in b.get(2, [])]

            def put():
                self.instances[iid].obj.put(records)
                return A_OK, b""
            self._enqueue(iid, rid, put)
        elif TASK_FLUSH in f:
            b = decode(f[TASK_FLUSH][-1])
            iid = g_int(b, 1)
            offsets = {}
            for entry in b.get(2, []):
                e = decode(entry)
                offsets[g_str(e, 1)] = g_int(e, 2)

            def flush():
                getattr(self.instances[iid].obj, "flush", lambda o: None)(offsets)
                return A_OK, b""
            self._enqueue(iid, rid, flush)
        elif CANCEL in f:
            pass  # the runtime drops the answer; the call runs to its end
        elif RELEASE in f:
            inst = self.instances.pop(g_int(decode(f[RELEASE][-1]), 1), None)
            if inst is not None:
                inst.released = True
                inst.calls.put(None)
        elif OFFSETS_ANSWER in f or RECORD_ANSWER in f:
            slot = self.waiting.get(rid)
            if slot is not None:
                slot[1] = decode(f[OFFSETS_ANSWER if OFFSETS_ANSWER in f else RECORD_ANSWER][-1])
                slot[0].set()
        else:
            log("wharf_plugin: unknown message", sorted(f))


def _read_exact(stream, n):
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve(plugins):
    """Serves the protocol on stdin/stdout until stdin closes, then exits at once (a
    blocked call of an instance does not keep the process alive)."""
    server = Server(plugins)
    stdin = sys.stdin.buffer
    while True:
        head = _read_exact(stdin, 4)
        if head is None:
            break
        msg = _read_exact(stdin, struct.unpack(">I", head)[0])
        if msg is None:
            break
        server.handle(msg)
    os._exit(0)
