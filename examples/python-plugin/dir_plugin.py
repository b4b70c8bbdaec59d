"""dir-source and dir-sink: the plugin the conformance kit's own tests use
(testkit/tests/catches_defects.rs), written in Python and run out of process.

A connector provisions a directory `<root>/dir-<connector>` holding an `owner` file (its
incarnation) and a `shared` file; each task adds `task-<n>`. Only a deletion removes them,
and only when the incarnation owns them. The user's own `<root>/user-data.txt` is never
touched. Every call is appended to `<root>/events.log` ("<pid> <call> <name> ...").

dir-source's tasks produce `emit` records (values `<connector>-<n>`, one per poll) to
`topic`; with `poll.blocks=true` a poll never returns. dir-sink's tasks append each record
value to `<root>/dir-<connector>/sink-<task>.out` on flush.

DIR_PLUGIN_PREFIX, when set, is put before both plugin names (two processes of this
plugin in one executor then offer different names). The environment variable DIR_PLUGIN_DEFECT makes it wrong on purpose, as the kit's tests
do: drops-on-plain-stop, second-delete-errors, drops-pre-existing, ignores-incarnation.
"""

import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wharf_plugin import ConfigKey, PluginDef, Record, log, serve  # noqa: E402

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
        event(config, "connector-start", ctx.connector, "cleanup_only=%s" % ctx.cleanup_only)
        if ctx.cleanup_only:
            return
        owner = owner_of(self.dir)
        if owner is not None and owner != ctx.incarnation and DEFECT != "ignores-incarnation":
            raise RuntimeError("%s is owned by %s" % (self.dir, owner))
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "owner"), "w") as f:
            f.write(ctx.incarnation)
        open(os.path.join(self.dir, "shared"), "w").close()

    def task_configs(self, max_tasks):
        return [{} for _ in range(max_tasks)]

    def stop(self, deleted):
        event(self.config, "connector-stop", self.name, "deleted=%s" % str(deleted).lower())
        if not deleted and DEFECT != "drops-on-plain-stop":
            return
        owner = owner_of(self.dir)
        if owner is not None and (owner == self.incarnation or DEFECT == "ignores-incarnation"):
            shutil.rmtree(self.dir)
        elif owner is None and not os.path.exists(self.dir) and DEFECT == "second-delete-errors":
            raise RuntimeError("%s is gone" % self.dir)
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
        if not ctx.cleanup_only:
            open(self.file, "w").close()
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
        except FileNotFoundError:
            pass


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
