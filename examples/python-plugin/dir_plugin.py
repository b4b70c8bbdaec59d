"""dir-source and dir-sink: the plugin the conformance kit's own tests use
(testkit/tests/catches_defects.rs), written in Python and run out of process.

A connector provisions a directory `<root>/dir-<connector>` holding an `owner` file (its
incarnation) and a `shared` file; each task adds `task-<n>`. Only a deletion removes them,
and only when the incarnation owns them. The user's own `<root>/user-data.txt` is never
touched. Each goes into the resource ledger (docs/resources.md): the directory and the
task files as created (intended before they are made, released when a deletion removed
them, absent when it found them gone), the user's file as adopted. Every call is appended to `<root>/events.log` ("<pid> <call> <name> ...").

dir-source's tasks produce `emit` records (values `<connector>-<n>`, one per poll) to
`topic`; with `poll.blocks=true` a poll never returns. dir-sink's tasks append each record
value to `<root>/dir-<connector>/sink-<task>.out` on flush.

DIR_PLUGIN_PREFIX, when set, is put before both plugin names (two processes of this
plugin in one executor then offer different names). The environment variable DIR_PLUGIN_DEFECT makes it wrong on purpose, as the kit's tests
do: drops-on-plain-stop, second-delete-errors, drops-pre-existing, ignores-incarnation,
skips-ledger (records nothing), releases-nothing (never releases what it removed).
"""

import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wharf_plugin import ConfigKey, PluginDef, Record, Resource, log, serve  # noqa: E402

DEFECT = os.environ.get("DIR_PLUGIN_DEFECT", "none")
USER_FILE = "user-data.txt"


def dir_of(name, config):
    return os.path.join(config["root"], "dir-" + name)


def owner_of(d):
    try:
        with open(os.path.join(d, "owner")) as f:
            return f.read()
    except FileNotFoundError:
        return None


def entry(kind, path, origin="created"):
    """The ledger entry of a file or directory at `path`."""
    return Resource(kind, os.path.basename(path), {"path": path}, origin)


def record(ctx_resources, change, resource):
    """A ledger change, unless the defect skips the ledger (or its releases)."""
    if DEFECT == "skips-ledger":
        return
    if DEFECT == "releases-nothing" and change in ("release", "absent"):
        return
    getattr(ctx_resources, change)(resource)


def event(config, *words):
    root = config.get("root")
    if root:
        with open(os.path.join(root, "events.log"), "a") as f:
            f.write(" ".join([str(os.getpid())] + [str(w) for w in words]) + "\n")


class DirConnector:
    @staticmethod
    def validate(config):
        """The plugin's own check: the root must be an existing directory."""
        root = config.get("root")
        if root and not os.path.isdir(root):
            return {"root": ["is not an existing directory"]}
        return {}

    def start(self, ctx, config):
        self.config, self.name, self.incarnation = config, ctx.connector, ctx.incarnation
        self.dir = dir_of(ctx.connector, config)
        self.resources = ctx.resources
        event(config, "connector-start", ctx.connector, "cleanup_only=%s" % ctx.cleanup_only)
        if ctx.cleanup_only:
            return
        owner = owner_of(self.dir)
        if owner is not None and owner != ctx.incarnation and DEFECT != "ignores-incarnation":
            raise RuntimeError("%s is owned by %s" % (self.dir, owner))
        made = entry("directory", self.dir)
        record(self.resources, "intend", made)
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "owner"), "w") as f:
            f.write(ctx.incarnation)
        open(os.path.join(self.dir, "shared"), "w").close()
        record(self.resources, "confirm", made)
        user = os.path.join(config["root"], USER_FILE)
        if os.path.exists(user):
            record(self.resources, "intend", entry("file", user, "adopted"))
            record(self.resources, "confirm", entry("file", user, "adopted"))

    def task_configs(self, max_tasks):
        return [{} for _ in range(max_tasks)]

    def stop(self, deleted):
        event(self.config, "connector-stop", self.name, "deleted=%s" % str(deleted).lower())
        if not deleted and DEFECT != "drops-on-plain-stop":
            return
        owner = owner_of(self.dir)
        if owner is not None and (owner == self.incarnation or DEFECT == "ignores-incarnation"):
            shutil.rmtree(self.dir)
            record(self.resources, "release", entry("directory", self.dir))
        elif owner is None and not os.path.exists(self.dir) and DEFECT == "second-delete-errors":
            raise RuntimeError("%s is gone" % self.dir)
        elif owner is None and not os.path.exists(self.dir):
            record(self.resources, "absent", entry("directory", self.dir))
        if deleted and DEFECT == "drops-pre-existing":
            try:
                os.remove(os.path.join(self.config["root"], USER_FILE))
            except FileNotFoundError:
                pass


class DirTask:
    def start(self, ctx, config):
        self.config, self.ctx = ctx.connector_config, ctx
        self.name = "%s/%d" % (ctx.connector, ctx.task)
        d = dir_of(ctx.connector, self.config)
        self.file = os.path.join(d, "task-%d" % ctx.task)
        self.incarnation = ctx.incarnation
        event(self.config, "task-start", self.name, "cleanup_only=%s" % ctx.cleanup_only)
        self.resources = ctx.resources
        if not ctx.cleanup_only:
            record(self.resources, "intend", entry("file", self.file))
            open(self.file, "w").close()
            record(self.resources, "confirm", entry("file", self.file))
        self.partition = {"connector": ctx.connector, "task": ctx.task}
        known = ctx.read_offsets([self.partition]) if not ctx.cleanup_only else {}
        self.next = 0
        for offset in known.values():
            self.next = offset["n"] + 1
        self.emit = int(self.config.get("emit", "0"))
        self.topic = self.config.get("topic", "dir-" + ctx.connector)
        self.blocks = self.config.get("poll.blocks", "false") == "true"
        self.out = []

    def poll(self):
        if self.blocks:
            event(self.config, "poll-blocking", self.name)
            threading.Event().wait()  # never returns
        if self.next >= self.emit:
            time.sleep(0.1)
            return []
        n, self.next = self.next, self.next + 1
        value = "%s-%d" % (self.ctx.connector, n)
        return [Record(self.topic, value, self.partition, {"n": n})]

    def put(self, records):
        self.out.extend(r.value for r in records)

    def flush(self, offsets):
        if self.out:
            path = os.path.join(os.path.dirname(self.file), "sink-%d.out" % self.ctx.task)
            with open(path, "ab") as f:
                f.write(b"".join(v + b"\n" for v in self.out))
            self.out = []

    def stop(self, deleted):
        event(self.config, "task-stop", self.name, "deleted=%s" % str(deleted).lower())
        if not deleted:
            return
        owner = owner_of(os.path.dirname(self.file))
        if DEFECT != "ignores-incarnation" and owner is not None and owner != self.incarnation:
            return
        try:
            os.remove(self.file)
            record(self.resources, "release", entry("file", self.file))
        except FileNotFoundError:
            record(self.resources, "absent", entry("file", self.file))


CONFIG = [
    ConfigKey("root", documentation="Directory the connector's directory is made in.",
              required=True, importance="high"),
    ConfigKey("emit", type="int", documentation="Records each source task produces.", default="0"),
    ConfigKey("topic", documentation="Topic of the records (default dir-<connector>)."),
    ConfigKey("poll.blocks", type="boolean", documentation="A poll never returns.", default="false"),
]

if __name__ == "__main__":
    log("dir_plugin: pid %d, defect %s" % (os.getpid(), DEFECT))
    prefix = os.environ.get("DIR_PLUGIN_PREFIX", "")
    serve([
        PluginDef(prefix + "dir-source", "1.0", "source", DirConnector, DirTask, CONFIG),
        PluginDef(prefix + "dir-sink", "1.0", "sink", DirConnector, DirTask, CONFIG),
    ])
