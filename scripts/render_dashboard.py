#!/usr/bin/env python3
"""Renders the Grafana dashboard docs/grafana/wharf-dashboard.json from a real run (issue 16).

Grafana itself cannot be installed here (not in Debian; AGPL), so this draws the panels
with matplotlib from the same PromQL the dashboard's JSON carries, evaluated by a real
Prometheus that scraped a real cluster. Started by scripts/render-dashboard, which makes
the venv with matplotlib and finds the binaries.

  run     start NATS JetStream, a wharf-control-plane (redb store), two wharf-executor
          processes (each with --metrics-listen) and Prometheus on loopback under a temp dir,
          drive SCENARIO through the Kafka Connect REST API, query every panel's
          expressions (query_range; instant for table panels), save them as JSON, render.
  render  draw the PNG again from a saved JSON (no cluster).

Decisions (what to run when, what a panel's expression and legend become, the layout,
value formatting) are pure functions; the classes below only start processes and call
HTTP.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

# --- what the run does ---------------------------------------------------------------

#: Prometheus scrape interval, in seconds (its practical floor is 1 s).
SCRAPE_INTERVAL_S = 1
#: Lease the control plane grants, in milliseconds: short, so that a frozen executor is
#: marked lost within seconds (default 10000).
LEASE_MS = 3000
#: Heartbeat interval handed to executors, in milliseconds.
HEARTBEAT_MS = 300
#: Upper bound on any wait for a condition, in seconds.
WAIT_DEADLINE_S = 60
#: Lines the script appends to the file-source's input per second.
CLICK_LINES_PER_S = 100

#: Connectors created at the start: (name, config). File paths are relative to the
#: executors' --file-root (the run's temp dir); test-* plugins need --enable-test-plugins.
CONNECTORS = [
    # ~ 3 tasks x 5 records / 50 ms: a steady source, read by a sink on either executor.
    ("orders-source", {"connector.class": "test-source", "tasks.max": "3",
                       "test.poll.block.ms": "50", "test.records.per.poll": "5"}),
    ("orders-archive", {"connector.class": "test-sink", "tasks.max": "2",
                        "topics": "test-orders-source"}),
    ("clicks-source", {"connector.class": "file-source", "file": "clicks.log",
                       "topic": "clicks"}),
    ("clicks-sink", {"connector.class": "file-sink", "file": "clicks-out.jsonl",
                     "topics": "clicks"}),
    # Slow cleanup: every stop sleeps 20 s, so its deletion shows RUNNING steps for ~40 s
    # (the task steps in parallel, then the connector instance's).
    ("inventory-source", {"connector.class": "test-source", "tasks.max": "2",
                          "test.poll.block.ms": "100", "test.stop.delay.ms": "20000"}),
    # Failing cleanup: exhausts its 4 attempts, waits as FAILED until forced.
    ("legacy-source", {"connector.class": "test-source", "tasks.max": "2",
                       "test.poll.block.ms": "100", "test.stop.fail.times": "1000",
                       "cleanup.max.attempts": "4"}),
    # Failing cleanup, left DELETING at the end of the run: what the table shows.
    ("ledger-source", {"connector.class": "test-source", "tasks.max": "2",
                       "test.poll.block.ms": "100", "test.stop.fail.times": "1000",
                       "cleanup.max.attempts": "6"}),
    # Failing cleanup with cleanup.policy = give-up: finishes with a leak report.
    ("scratch-source", {"connector.class": "test-source", "tasks.max": "1",
                        "test.poll.block.ms": "100", "test.stop.fail.times": "1000",
                        "cleanup.max.attempts": "2", "cleanup.policy": "give-up"}),
    # Deleted with keepResources=true.
    ("staging-source", {"connector.class": "test-source", "tasks.max": "1",
                        "test.poll.block.ms": "100"}),
    # Its tasks panic in poll: FAILED tasks.
    ("flaky-source", {"connector.class": "test-source", "tasks.max": "2",
                      "test.poll.panic": "true"}),
]

#: The scenario: (seconds after the start, action, connector). Actions run in order, each
#: not before its time (the times only spread the events over the picture's time axis;
#: the first comes after a minute, once the panels' rate(...[1m]) cover only steady
#: polling); each then waits for its effect (a state, or the connector gone) with a
#: deadline.
SCENARIO = [
    (60, "pause", "clicks-source"),
    (75, "delete", "inventory-source"),
    (80, "delete", "legacy-source"),
    (85, "delete", "scratch-source"),
    (90, "delete-keep-resources", "staging-source"),
    (100, "resume", "clicks-source"),
    (110, "freeze-executor", "exec-2"),
    (140, "force-delete", "legacy-source"),
    (150, "delete", "flaky-source"),
    (160, "delete", "ledger-source"),
    (195, "end", ""),
]

#: Task state each connector settles in after creation (the connector instance RUNNING).
SETTLED = {"flaky-source": "FAILED"}


def scenario_text() -> str:
    """One line describing SCENARIO, for the picture's caption.

    >>> scenario_text().startswith('10 connectors; t+60 s pause clicks-source')
    True
    """
    words = {"delete-keep-resources": "delete (keep resources)", "force-delete": "force delete",
             "freeze-executor": "SIGSTOP until lost, then SIGCONT:"}
    parts = [f"t+{t} s {words.get(a, a)} {n}".strip() for t, a, n in SCENARIO if a != "end"]
    return f"{len(CONNECTORS)} connectors; " + ", ".join(parts)


def scrape_config(targets: dict[str, str], interval_s: int) -> str:
    """Prometheus config scraping each `name: IP:PORT` as its own target, with the
    `instance` label set to the name (so legends say exec-1, not 127.0.0.2:41234).

    >>> print(scrape_config({'cp': '127.0.0.1:9'}, 1))  # doctest: +NORMALIZE_WHITESPACE
    global: {scrape_interval: 1s, scrape_timeout: 1s}
    scrape_configs:
    - job_name: wharf
      static_configs:
      - targets: ['127.0.0.1:9']
        labels: {instance: 'cp'}
    """
    lines = [f"global: {{scrape_interval: {interval_s}s, scrape_timeout: {interval_s}s}}",
             "scrape_configs:", "- job_name: wharf", "  static_configs:"]
    for name, addr in targets.items():
        lines += [f"  - targets: ['{addr}']", f"    labels: {{instance: '{name}'}}"]
    return "\n".join(lines)


def status_settled(status: dict, want_tasks: str) -> bool:
    """Whether a Connect-style status body shows the connector RUNNING and at least one
    task, every task in `want_tasks`.

    >>> status_settled({'connector': {'state': 'RUNNING'}, 'tasks': [{'state': 'FAILED'}]}, 'FAILED')
    True
    >>> status_settled({'connector': {'state': 'RUNNING'}, 'tasks': []}, 'RUNNING')
    False
    """
    tasks = status.get("tasks") or []
    return (status.get("connector", {}).get("state") == "RUNNING" and bool(tasks)
            and all(t.get("state") == want_tasks for t in tasks))


def all_in(status: dict, state: str) -> bool:
    """Whether the connector instance and every task are in `state`.

    >>> all_in({'connector': {'state': 'PAUSED'}, 'tasks': [{'state': 'PAUSED'}]}, 'PAUSED')
    True
    """
    return (status.get("connector", {}).get("state") == state
            and all(t.get("state") == state for t in status.get("tasks") or []))


def metric_value(page: str, series: str) -> float | None:
    """The value of `series` (name with its labels, as written on the page) on a
    Prometheus text page, or None.

    >>> metric_value('a{s="lost"} 1\\nb 2\\n', 'a{s="lost"}')
    1.0
    """
    for line in page.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


# --- what the dashboard shows ----------------------------------------------------------

@dataclass
class Target:
    """One query of a panel."""
    expr: str
    legend: str
    instant: bool


@dataclass
class Panel:
    """One dashboard panel (or a row header: kind 'row') with its grid position in
    Grafana units (24 columns; rows of height 1 unit = 30 px in Grafana)."""
    kind: str
    title: str
    x: int
    y: int
    w: int
    h: int
    unit: str = ""
    description: str = ""
    targets: list[Target] = field(default_factory=list)


def dashboard_panels(dash: dict) -> list[Panel]:
    """The dashboard's rows and panels (collapsed rows' panels included), by position.

    >>> d = {'panels': [{'type': 'row', 'title': 'R', 'gridPos': {'x': 0, 'y': 0, 'w': 24, 'h': 1}},
    ...   {'type': 'stat', 'title': 'S', 'gridPos': {'x': 0, 'y': 1, 'w': 6, 'h': 8},
    ...    'targets': [{'expr': 'up', 'legendFormat': 'u'}]}]}
    >>> [(p.kind, p.title, p.targets[0].expr if p.targets else None) for p in dashboard_panels(d)]
    [('row', 'R', None), ('stat', 'S', 'up')]
    """
    flat = []
    for p in dash.get("panels", []):
        flat.append(p)
        flat.extend(p.get("panels", []))
    out = []
    for p in flat:
        g = p.get("gridPos", {})
        out.append(Panel(
            kind=p.get("type", ""), title=p.get("title", ""),
            x=g.get("x", 0), y=g.get("y", 0), w=g.get("w", 24), h=g.get("h", 8),
            unit=p.get("fieldConfig", {}).get("defaults", {}).get("unit", "") or "",
            description=p.get("description", ""),
            targets=[Target(t["expr"], t.get("legendFormat", ""),
                            bool(t.get("instant")) or t.get("format") == "table")
                     for t in p.get("targets", []) if t.get("expr")]))
    return sorted(out, key=lambda p: (p.y, p.x))


def expand_expr(expr: str, step_s: int) -> str:
    """Grafana's interval variables replaced as Grafana would for a query at `step_s`
    ($__rate_interval: max(4 x scrape interval, step + scrape interval)).

    >>> expand_expr('rate(x[$__rate_interval])', 2)
    'rate(x[4s])'
    """
    rate = max(4 * SCRAPE_INTERVAL_S, step_s + SCRAPE_INTERVAL_S)
    return (expr.replace("$__rate_interval", f"{rate}s")
            .replace("$__interval", f"{step_s}s"))


def legend_of(fmt: str, labels: dict, expr: str) -> str:
    """A series' legend: Grafana's `{{label}}` template filled in; without a template, the
    label set (or the expression when there are no labels), as Grafana shows it.

    >>> legend_of('{{instance}} {{state}}', {'instance': 'exec-1', 'state': 'running'}, 'e')
    'exec-1 running'
    >>> legend_of('', {}, 'sum(x)')
    'sum(x)'
    """
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: str(labels.get(m.group(1), "")), fmt).strip()
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    if not shown:
        return expr
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}"


def step_for(range_s: float, points: int = 240) -> int:
    """query_range step in whole seconds: about `points` points over the range, never
    finer than the scrape interval.

    >>> step_for(180)
    1
    >>> step_for(3600)
    15
    """
    return max(SCRAPE_INTERVAL_S, math.ceil(range_s / points))


def format_value(v: float, unit: str) -> str:
    """A value as Grafana's unit formats it, short: 's' (seconds), 'ops' (per second),
    'Bps' (bytes per second, SI prefixes), else plain with K/M/G.

    >>> [format_value(0.0042, 's'), format_value(75, 's'), format_value(1234, 'ops')]
    ['4.2 ms', '1.2 min', '1.23K ops/s']
    >>> [format_value(2500, 'Bps'), format_value(0, 'Bps'), format_value(3, ''), format_value(0.5, '')]
    ['2.5 kB/s', '0 B/s', '3', '0.5']
    """
    if v is None or math.isnan(v):
        return "-"
    if unit == "s":
        a = abs(v)
        if a == 0:
            return "0 s"
        if a < 1e-3:
            return f"{v * 1e6:.3g} µs"
        if a < 1:
            return f"{v * 1e3:.3g} ms"
        if a < 60:
            return f"{v:.3g} s"
        return f"{v / 60:.2g} min"
    scaled, prefix = v, ""
    for div, p in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            scaled, prefix = v / div, p
            break
    num = f"{scaled:.3g}"
    if unit == "ops":
        return f"{num}{prefix} ops/s"
    if unit == "Bps":
        return f"{num} {prefix.replace('K', 'k')}B/s"
    return f"{num}{prefix}"


def split_gaps(points: list[tuple[float, float]], step_s: int) -> list[tuple[float, float]]:
    """Points with a NaN put into every gap longer than 1.5 steps, so that a series that
    vanished and came back is drawn with a break, as Grafana does.

    >>> split_gaps([(0, 1), (1, 1), (5, 2)], 1)[2][1]
    nan
    """
    out = []
    for i, (t, v) in enumerate(points):
        if i and t - points[i - 1][0] > 1.5 * step_s:
            out.append((points[i - 1][0] + step_s, float("nan")))
        out.append((t, v))
    return out


# --- processes --------------------------------------------------------------------------

def free_addr(ip: str) -> str:
    """A free `IP:PORT` on `ip` (bound, read, released), for a --metrics-listen."""
    with socket.socket() as s:
        s.bind((ip, 0))
        return f"{ip}:{s.getsockname()[1]}"


def wait_until(what: str, check, deadline_s: float = WAIT_DEADLINE_S, every_s: float = 0.1):
    """Polls `check()` until it returns a true value and returns it; raises after
    `deadline_s` naming `what`."""
    end = time.monotonic() + deadline_s
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(every_s)


def http(method: str, url: str, body=None, timeout: float = 10.0) -> tuple[int, str]:
    """One HTTP call: (status, body text); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


class Procs:
    """Processes this run started (and only those), each logging to WORK/NAME.log; all
    stopped (SIGCONT, SIGTERM, then SIGKILL after 15 s) by `stop_all`."""

    def __init__(self, work: str):
        self.work = work
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(os.path.join(self.work, f"{name}.log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})})
        self.procs[name] = p
        return p

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        end = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Cluster:
    """NATS JetStream, a control plane, exec-1 (127.0.0.2) and exec-2 (127.0.0.3), and
    Prometheus scraping the three metrics listeners, all under `work`."""

    def __init__(self, work: str, bin_dir: str, prometheus: str, nats: str):
        self.work, self.bin_dir = work, bin_dir
        self.procs = Procs(work)
        self.prometheus_bin, self.nats_bin = prometheus, nats
        self.metrics: dict[str, str] = {}
        self.rest = self.prom = ""

    def _addr_file(self, path: str, who: str) -> str:
        def read():
            if not all(self.procs.alive(n) for n in self.procs.procs):
                dead = [n for n in self.procs.procs if not self.procs.alive(n)]
                raise RuntimeError(f"{dead} exited; see the logs in {self.work}")
            try:
                return open(path).read().strip()
            except OSError:
                return ""
        return wait_until(f"{who} to bind ({path})", read)

    def start(self) -> None:
        w = self.work
        nats_dir = os.path.join(w, "nats")
        os.makedirs(nats_dir)
        self.procs.start("nats", [self.nats_bin, "-a", "127.0.0.1", "-p", "-1", "-js",
                                  "-sd", os.path.join(nats_dir, "js"), "--ports_file_dir", nats_dir])
        ports = wait_until("nats-server to listen", lambda: [
            f for f in os.listdir(nats_dir) if f.endswith(".ports")])
        nats_url = json.load(open(os.path.join(nats_dir, ports[0])))["nats"][0]

        env = {"RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        self.metrics["control-plane"] = free_addr("127.0.0.1")
        cp_dir = os.path.join(w, "cp")
        self.procs.start("control-plane", [
            f"{self.bin_dir}/wharf-control-plane", "--listen", "127.0.0.1:0", "--data-dir", cp_dir,
            "--rest-listen", "127.0.0.1:0", "--metrics-listen", self.metrics["control-plane"],
            "--lease-ms", str(LEASE_MS), "--heartbeat-interval-ms", str(HEARTBEAT_MS)], env)
        cp = self._addr_file(os.path.join(cp_dir, "listen.addr"), "the control plane")
        self.rest = "http://" + self._addr_file(os.path.join(cp_dir, "rest.addr"), "its REST gateway")
        for i in (1, 2):
            name, ip = f"exec-{i}", f"127.0.0.{i + 1}"
            self.metrics[name] = free_addr(ip)
            d = os.path.join(w, name)
            self.procs.start(name, [
                f"{self.bin_dir}/wharf-executor", "--listen", f"{ip}:0", "--control-plane",
                f"http://{cp}", "--data-dir", d, "--executor-id", name, "--record-log", nats_url,
                "--file-root", w, "--enable-test-plugins", "--graceful-timeout-ms", "5000",
                "--metrics-listen", self.metrics[name]], env)
            self._addr_file(os.path.join(d, "listen.addr"), name)
        wait_until("both executors live", lambda: metric_value(
            http("GET", f"http://{self.metrics['control-plane']}/metrics")[1],
            'wharf_executor_count{state="live"}') == 2)

        prom_dir = os.path.join(w, "prometheus")
        os.makedirs(prom_dir)
        cfg = os.path.join(prom_dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(scrape_config(self.metrics, SCRAPE_INTERVAL_S))
        listen = free_addr("127.0.0.1")
        self.prom = f"http://{listen}"
        self.procs.start("prometheus", [
            self.prometheus_bin, f"--config.file={cfg}", f"--storage.tsdb.path={prom_dir}/data",
            f"--web.listen-address={listen}"])
        wait_until("Prometheus ready", lambda: http("GET", f"{self.prom}/-/ready")[0] == 200)
        wait_until("Prometheus scraping all three targets", lambda: self.instant(
            "sum(up)") == [3.0])

    def instant(self, promql: str, at: float | None = None) -> list[float]:
        """Values of an instant query (empty on error)."""
        q = {"query": promql, **({"time": f"{at:.3f}"} if at else {})}
        code, body = http("GET", f"{self.prom}/api/v1/query?" + urllib.parse.urlencode(q))
        if code != 200:
            return []
        return [float(r["value"][1]) for r in json.loads(body)["data"]["result"]]

    def query(self, promql: str, start: float, end: float, step: int, instant: bool) -> list[dict]:
        """A panel query: [{'metric': labels, 'values': [[t, v], ...]}]; raises on a
        PromQL error, so that a wrong expression in the dashboard stops the run."""
        if instant:
            q = {"query": promql, "time": f"{end:.3f}"}
            url = f"{self.prom}/api/v1/query?" + urllib.parse.urlencode(q)
        else:
            q = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}s"}
            url = f"{self.prom}/api/v1/query_range?" + urllib.parse.urlencode(q)
        code, body = http("GET", url, timeout=30)
        if code != 200:
            raise RuntimeError(f"Prometheus refused {promql!r}: {code} {body}")
        res = json.loads(body)["data"]["result"]
        return [{"metric": r["metric"],
                 "values": [[t, float(v)] for t, v in (r.get("values") or [r["value"]])]}
                for r in res]

    # Admin calls, over the Kafka Connect REST gateway (docs/rest.md).
    def call(self, method: str, path: str, body=None, ok=(200, 201, 202, 204)) -> str:
        code, text = http(method, self.rest + path, body)
        if code not in ok:
            raise RuntimeError(f"{method} {path}: {code} {text}")
        return text

    def status(self, name: str) -> dict | None:
        code, text = http("GET", f"{self.rest}/connectors/{name}/status")
        return json.loads(text) if code == 200 else None

    def wait_status(self, name: str, what: str, pred) -> None:
        wait_until(f"{name}: {what}", lambda: (s := self.status(name)) is not None and pred(s))

    def wait_deleting_or_gone(self, name: str) -> None:
        """Waits until the deletion is recorded: DELETING, or already finished (404)."""
        def check():
            code, text = http("GET", f"{self.rest}/connectors/{name}/status")
            return code == 404 or (code == 200 and json.loads(text)["connector"]["state"] == "DELETING")
        wait_until(f"{name} DELETING or deleted", check)

    def wait_gone(self, name: str, deadline_s: float = WAIT_DEADLINE_S) -> None:
        wait_until(f"{name} deleted", lambda: http(
            "GET", f"{self.rest}/connectors/{name}")[0] == 404, deadline_s)

    def cp_metric(self, series: str) -> float | None:
        return metric_value(http("GET", f"http://{self.metrics['control-plane']}/metrics")[1], series)


def write_clicks(path: str, stop: threading.Event) -> None:
    """Appends CLICK_LINES_PER_S JSON lines a second to the file-source's input (a paced
    load, not a sequencing wait) until `stop` is set."""
    n = 0
    with open(path, "a") as f:
        while not stop.wait(0.25):
            for _ in range(CLICK_LINES_PER_S // 4):
                f.write(json.dumps({"n": n, "page": f"/item/{n % 97}"}) + "\n")
                n += 1
            f.flush()


def drive(c: Cluster, t0: float, say) -> None:
    """Creates CONNECTORS, then runs SCENARIO, each action waiting for its effect."""
    for name, cfg in CONNECTORS:
        if cfg["connector.class"].startswith("test-"):
            # The test plugins record their lifecycle calls there (and count injected
            # cleanup failures beside it).
            cfg = {**cfg, "lifecycle.path": os.path.join(c.work, f"lifecycle-{name}.jsonl")}
        c.call("POST", "/connectors", {"name": name, "config": cfg})
    for name, _ in CONNECTORS:
        want = SETTLED.get(name, "RUNNING")
        c.wait_status(name, f"RUNNING with tasks {want}", lambda s, w=want: status_settled(s, w))
    say(f"t+{time.time() - t0:.0f} s: {len(CONNECTORS)} connectors running")
    for at, action, name in SCENARIO:
        # Pacing for the picture's time axis, not sequencing: each action waits below.
        time.sleep(max(0.0, t0 + at - time.time()))
        say(f"t+{time.time() - t0:.0f} s: {action} {name}")
        if action == "pause":
            c.call("PUT", f"/connectors/{name}/pause")
            c.wait_status(name, "PAUSED", lambda s: all_in(s, "PAUSED"))
        elif action == "resume":
            c.call("PUT", f"/connectors/{name}/resume")
            c.wait_status(name, "RUNNING", lambda s: all_in(s, "RUNNING"))
        elif action == "delete":
            c.call("DELETE", f"/connectors/{name}")
            c.wait_deleting_or_gone(name)
        elif action == "delete-keep-resources":
            c.call("DELETE", f"/connectors/{name}?keepResources=true")
            c.wait_gone(name)
        elif action == "force-delete":
            c.call("DELETE", f"/connectors/{name}?force=true")
            c.wait_gone(name)
        elif action == "freeze-executor":
            p = c.procs.procs[name]
            p.send_signal(signal.SIGSTOP)
            try:
                wait_until(f"{name} marked lost", lambda: (c.cp_metric(
                    'wharf_executor_count{state="lost"}') or 0) >= 1)
            finally:
                p.send_signal(signal.SIGCONT)
            say(f"t+{time.time() - t0:.0f} s: {name} lost, resumed")
            wait_until(f"{name} registered again", lambda: metric_value(
                http("GET", f"http://{c.metrics[name]}/metrics")[1],
                "wharf_executor_registered") == 1 and c.cp_metric(
                'wharf_executor_count{state="live"}') == 2)
        elif action == "end":
            pass
    # What the scenario promises the picture shows.
    for name in ("inventory-source", "scratch-source", "flaky-source"):
        c.wait_gone(name)
    if not (s := c.status("ledger-source")) or s["connector"]["state"] != "DELETING":
        raise RuntimeError(f"ledger-source should still be DELETING, status: {s}")


def fetch(c: Cluster, panels: list[Panel], start: float, end: float) -> dict:
    """Every panel's query results over [start, end]."""
    step = step_for(end - start)
    out = []
    for p in panels:
        results = []
        for t in p.targets:
            expr = expand_expr(t.expr, step)
            results.append({"expr": expr, "legend": t.legend, "instant": t.instant,
                            "series": c.query(expr, start, end, step, t.instant)})
        out.append({"title": p.title, "results": results})
    return {"start": start, "end": end, "step": step, "panels": out}


# --- drawing ----------------------------------------------------------------------------

#: Grafana's dark theme: page, panel, border, text, weak text (hex colours of its theme).
THEME = {"page": "#111217", "panel": "#181b1f", "border": "#2c3235", "text": "#ccccdc",
         "weak": "#8e8e9e", "grid": "#2a2d33"}
#: Grafana's classic palette, in its order.
PALETTE = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
           "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17", "#890f02", "#0a437c"]
#: Pixels per Grafana grid unit (width: 24 columns) in the PNG.
PX_W, PX_H, DPI = 62, 27, 100
#: Colours of the saved PNG (palette mode keeps it small; more keeps line colours true).
QUANT_COLORS = 128


def layout(panels: list[Panel], header_px: int) -> tuple[float, float, list[tuple[float, float, float, float]]]:
    """Figure size in inches and each panel's box (left, bottom, width, height) in figure
    fractions, from Grafana's gridPos; rows get their 1 unit; `header_px` on top.

    >>> w, h, boxes = layout([Panel('stat', 'S', 0, 0, 24, 8)], 0)
    >>> (round(w, 2), round(h, 2), [round(v, 3) for v in boxes[0]])
    (14.88, 2.16, [0.001, 0.009, 0.997, 0.981])
    """
    units = max(p.y + p.h for p in panels)
    wpx, hpx = 24 * PX_W, units * PX_H + header_px
    gap = 4
    boxes = []
    for p in panels:
        left = (p.x * PX_W + gap / 2) / wpx
        top = (header_px + p.y * PX_H + gap / 2) / hpx
        boxes.append((left, 1 - top - (p.h * PX_H - gap) / hpx, (p.w * PX_W - gap) / wpx,
                      (p.h * PX_H - gap) / hpx))
    return wpx / DPI, hpx / DPI, boxes


def render(data: dict, panels: list[Panel], out: str, caption: list[str]) -> None:
    """Draws the panels as Grafana lays them out into `out` (PNG, quantized)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    plt.rcParams.update({"font.size": 8, "font.family": "DejaVu Sans", "text.color": THEME["text"],
                         "axes.labelcolor": THEME["text"], "xtick.color": THEME["weak"],
                         "ytick.color": THEME["weak"], "axes.edgecolor": THEME["border"]})
    header_px = 18 * len(caption) + 12
    wi, hi, boxes = layout(panels, header_px)
    fig = plt.figure(figsize=(wi, hi), dpi=DPI, facecolor=THEME["page"])
    for i, line in enumerate(caption):
        fig.text(6 / (wi * DPI), 1 - (10 + 18 * i) / (hi * DPI), line, va="top",
                 fontsize=10 if i == 0 else 8, color=THEME["text"] if i == 0 else THEME["weak"],
                 weight="bold" if i == 0 else "normal")
    by_title = {p["title"]: p["results"] for p in data["panels"]}
    start, end, step = data["start"], data["end"], data["step"]
    t_start = dt.datetime.fromtimestamp(start, dt.timezone.utc)
    t_end = dt.datetime.fromtimestamp(end, dt.timezone.utc)
    px = 1 / (hi * DPI)  # one pixel, vertically, in figure fractions
    pw = 1 / (wi * DPI)
    for p, (l, b, w, h) in zip(panels, boxes):
        if p.kind == "row":
            fig.text(l + 4 * pw, b + h / 2, p.title, va="center", fontsize=10, weight="bold",
                     color=THEME["text"])
            continue
        fig.patches.append(FancyBboxPatch((l, b), w, h, transform=fig.transFigure,
                                          boxstyle="round,pad=0,rounding_size=0.002",
                                          facecolor=THEME["panel"], edgecolor=THEME["border"],
                                          linewidth=0.8, zorder=-10))
        fig.text(l + 8 * pw, b + h - 6 * px, p.title, va="top", fontsize=8.5, weight="bold",
                 color=THEME["text"])
        results = by_title.get(p.title, [])
        series = []  # (legend, [(t, v)])
        for r in results:
            for s in r["series"]:
                series.append((legend_of(r["legend"], s["metric"], r["expr"]), s))
        inner = (l + 8 * pw, b + 6 * px, w - 16 * pw, h - 30 * px)
        if p.kind == "table":
            draw_table(fig, inner, series)
            continue
        if not series or all(all(math.isnan(v) for _, v in s["values"]) for _, s in series):
            fig.text(l + w / 2, b + h / 2 - 8 * px, "No data", ha="center", va="center",
                     fontsize=11, color=THEME["weak"])
            continue
        if p.kind == "stat":
            draw_stat(fig, inner, series, p.unit, start, end)
            continue
        draw_timeseries(fig, inner, series, p.unit, step, (t_start, t_end), (pw, px))
    fig.savefig(out, dpi=DPI, facecolor=THEME["page"])
    plt.close(fig)
    from PIL import Image
    # Flat colours and thin lines: a palette keeps the picture small.
    Image.open(out).convert("RGB").quantize(colors=QUANT_COLORS, method=Image.Quantize.FASTOCTREE).save(
        out, optimize=True)


def legend_grid(labels: list[str], width_px: float, max_rows: int = 4) -> tuple[int, int]:
    """Columns and rows of a bottom legend (Grafana's list mode) for `labels` in
    `width_px`, at about 5.4 px a character plus 32 px for the swatch and spacing; at most
    `max_rows` rows (the entries beyond are summed up as '+N more').

    >>> legend_grid(['a' * 10] * 14, 480)
    (5, 3)
    >>> legend_grid(['x'] * 40, 100)
    (2, 4)
    """
    entry = max(len(s) for s in labels) * 5.4 + 32
    ncol = max(1, min(len(labels), int(width_px // entry)))
    return ncol, min(max_rows, math.ceil(len(labels) / ncol))


def row_major(n: int, ncol: int) -> list[int | None]:
    """The order to hand `n` legend entries to matplotlib (which fills column by column)
    so that they read row by row, as Grafana's legend does; None: an empty cell.

    >>> row_major(5, 3)
    [0, 3, 1, 4, 2, None]
    """
    rows = math.ceil(n / ncol)
    order = []
    for col in range(ncol):
        for row in range(rows):
            i = row * ncol + col
            order.append(i if i < n else None)
    return order


def time_ticks(start: float, end: float, width_px: float) -> list[float]:
    """Time axis ticks (unix seconds) on round boundaries, about one per 75 px as
    Grafana spaces them, none in the first 5 % of the axis (where its label would run into
    the y axis').

    >>> [t % 3600 for t in time_ticks(3600 * 5 + 2, 3600 * 5 + 200, 600)]
    [30, 60, 90, 120, 150, 180]
    >>> [t % 3600 for t in time_ticks(3600 * 5 + 2, 3600 * 5 + 200, 250)]
    [60, 120, 180]
    """
    every = next(e for e in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
                 if (end - start) / e <= max(1.0, width_px / 75))
    first = start + 0.05 * (end - start)
    t = math.ceil(first / every) * every
    out = []
    while t <= end:
        out.append(t)
        t += every
    return out


def draw_timeseries(fig, box, series, unit: str, step: int, xlim, pixel) -> None:
    """Grafana's time series panel: lines with a light fill, a y axis in the panel's unit,
    the legend as a list below."""
    import matplotlib.dates as mdates
    import matplotlib.ticker as ticker
    from matplotlib.lines import Line2D

    pw, px = pixel
    l, b, w, h = box
    labels = [name for name, _ in series]
    ncol, rows = legend_grid(labels, w / pw)
    shown = labels if len(labels) <= ncol * rows else labels[:ncol * rows - 1]
    legend_h = rows * 13 * px
    left = (64 if unit else 40) * pw
    ax = fig.add_axes((l + left, b + legend_h + 20 * px, w - left - 4 * pw, h - legend_h - 24 * px))
    ax.set_facecolor(THEME["panel"])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.grid(True, color=THEME["grid"], linewidth=0.6)
    ymax, handles, integral = 0.0, [], True
    for i, (name, s) in enumerate(series):
        pts = split_gaps([(t, v) for t, v in s["values"]], step)
        xs = [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t, _ in pts]
        ys = [v for _, v in pts]
        color = PALETTE[i % len(PALETTE)]
        ax.plot(xs, ys, color=color, linewidth=1.2)
        ax.fill_between(xs, ys, color=color, alpha=0.08, linewidth=0)
        finite = [v for v in ys if not math.isnan(v)]
        ymax = max([ymax] + finite)
        integral = integral and all(v == int(v) for v in finite)
        handles.append(Line2D([], [], color=color, linewidth=2))
    ax.set_xlim(*xlim)
    ax.set_ylim(0, ymax * 1.15 if ymax > 0 else 1)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=dt.timezone.utc))
    ticks = time_ticks(xlim[0].timestamp(), xlim[1].timestamp(), (w - left) / pw)
    ax.xaxis.set_major_locator(ticker.FixedLocator(
        [mdates.date2num(dt.datetime.fromtimestamp(t, dt.timezone.utc)) for t in ticks]))
    ax.tick_params(length=0, labelsize=7)
    ax.yaxis.set_major_locator(ticker.MaxNLocator(4, integer=integral and not unit))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: format_value(v, unit)))
    entries = handles[:len(shown)]
    if len(shown) < len(labels):
        entries.append(Line2D([], [], linewidth=0))
        shown = shown + [f"+{len(labels) - len(shown)} more"]
    order = row_major(len(shown), ncol)
    blank = Line2D([], [], linewidth=0)
    entries = [entries[i] if i is not None else blank for i in order]
    shown = [shown[i] if i is not None else "" for i in order]
    fig.legend(entries, shown, loc="upper left", bbox_to_anchor=(l, b + legend_h + 2 * px),
               bbox_transform=fig.transFigure, ncol=ncol, frameon=False, fontsize=7,
               handlelength=1.2, columnspacing=1.2, borderaxespad=0, borderpad=0,
               labelcolor=THEME["text"])


def draw_stat(fig, box, series, unit: str, start: float, end: float) -> None:
    """Grafana's stat panel (defaults: last value, coloured green, area sparkline)."""
    name, s = series[0]
    vals = [(t, v) for t, v in s["values"] if not math.isnan(v)]
    last = vals[-1][1] if vals else float("nan")
    l, b, w, h = box
    ax = fig.add_axes((l, b, w, h * 0.45))
    ax.set_axis_off()
    xs = [t for t, _ in vals]
    ys = [v for _, v in vals]
    ax.fill_between(xs, ys, color="#73bf69", alpha=0.25, linewidth=0, step="post")
    ax.plot(xs, ys, color="#73bf69", linewidth=1.0, drawstyle="steps-post")
    ax.set_xlim(start, end)
    ax.set_ylim(0, max(ys + [1]) * 1.1)
    fig.text(l + w / 2, b + h * 0.62, format_value(last, unit), ha="center", va="center",
             fontsize=34, weight="bold", color="#73bf69")


def draw_table(fig, box, series) -> None:
    """Grafana's table of an instant query in table format: a column per label
    (alphabetical, as Grafana orders them), then Value."""
    l, b, w, h = box
    if not series:
        fig.text(l + w / 2, b + h / 2, "No data", ha="center", va="center", fontsize=11,
                 color=THEME["weak"])
        return
    cols = sorted({k for _, s in series for k in s["metric"] if k != "__name__"})
    rows = [[s["metric"].get(k, "") for k in cols] + [format_value(s["values"][-1][1], "")]
            for _, s in series]
    ax = fig.add_axes(box)
    ax.set_axis_off()
    line_h = 1 / (max(len(rows), 6) + 1.5)
    headers = cols + ["Value"]
    xs = [i / len(headers) for i in range(len(headers))]
    for x, head in zip(xs, headers):
        ax.text(x, 1 - line_h / 2, head, fontsize=7.5, weight="bold", color="#6e9fff",
                va="center", transform=ax.transAxes)
    ax.axhline(1 - line_h, color=THEME["border"], linewidth=0.8)
    for r, row in enumerate(rows):
        y = 1 - line_h * (r + 1.5)
        for x, cell in zip(xs, row):
            ax.text(x, y, cell, fontsize=7.5, color=THEME["text"], va="center",
                    transform=ax.transAxes)
        ax.axhline(y - line_h / 2, color=THEME["grid"], linewidth=0.5)


# --- the commands -----------------------------------------------------------------------

def caption_of(meta: dict) -> list[str]:
    """The lines over the picture: what it is and how it was made."""
    when = dt.datetime.fromtimestamp(meta["start"], dt.timezone.utc)
    return [
        f"Wharf ({meta['dashboard']}), rendered with matplotlib by scripts/render-dashboard "
        f"from a real run on {when:%Y-%m-%d} {when:%H:%M}-"
        f"{dt.datetime.fromtimestamp(meta['end'], dt.timezone.utc):%H:%M} UTC",
        f"{meta['version']} ({meta['profile']} binaries): a control plane (redb) and 2 executors "
        f"with NATS JetStream on loopback; {meta['prometheus']} scraping every "
        f"{SCRAPE_INTERVAL_S} s; machine load average {meta.get('load', '?')} (2 cores); "
        "table panel at the end of the range.",
    ] + textwrap.wrap("Scenario: " + meta["scenario"], 230)


def first_line(argv: list[str]) -> str:
    """First line of a command's output, '' when it cannot run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).splitlines()[0].strip()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ""


def cmd_run(args) -> None:
    dash = json.load(open(args.dashboard))
    panels = dashboard_panels(dash)
    work = tempfile.mkdtemp(prefix="wharf-render-dashboard.")
    say = lambda m: print(f"render-dashboard: {m}", flush=True)  # noqa: E731
    say(f"work dir {work}")
    c = Cluster(work, args.bin_dir, args.prometheus, args.nats_server)
    stop = threading.Event()
    ok = False
    try:
        c.start()
        writer = threading.Thread(target=write_clicks, args=(os.path.join(work, "clicks.log"), stop),
                                  daemon=True)
        writer.start()
        start = time.time() - SCRAPE_INTERVAL_S  # from the first scrape of all three
        say("cluster and Prometheus up; running the scenario (about 3 minutes)")
        drive(c, time.time(), say)
        end = time.time()
        data = fetch(c, panels, start, end)
        ok = True
    finally:
        stop.set()
        c.procs.stop_all()
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"logs and data kept in {work}")
    data["meta"] = {
        "start": data["start"], "end": data["end"],
        "dashboard": os.path.relpath(args.dashboard, args.repo),
        "version": first_line([f"{args.bin_dir}/wharf-control-plane", "--version"]),
        "profile": args.profile,
        "prometheus": "Prometheus " + (first_line([args.prometheus, "--version"]).split() + ["?"] * 3)[2],
        "scenario": scenario_text(),
        # The 1-minute load average at the end of the run: the latency panels depend on it.
        "load": round(os.getloadavg()[0], 2),
    }
    with open(args.data_out, "w") as f:
        json.dump(data, f)
    say(f"query results saved in {args.data_out}")
    render(data, panels, args.out, caption_of(data["meta"]))
    say(f"wrote {args.out} ({os.path.getsize(args.out) // 1024} KiB)")


def cmd_render(args) -> None:
    panels = dashboard_panels(json.load(open(args.dashboard)))
    data = json.load(open(args.data))
    render(data, panels, args.out, caption_of(data["meta"]))
    print(f"render-dashboard: wrote {args.out} ({os.path.getsize(args.out) // 1024} KiB)")


def main() -> None:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dashboard", default=os.path.join(repo, "docs/grafana/wharf-dashboard.json"))
    common.add_argument("--out", default=os.path.join(repo, "docs/img/dashboard.png"), help="PNG to write")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", parents=[common], help="run the cluster and the scenario, then render")
    run.add_argument("--bin-dir", required=True, help="directory of wharf-control-plane and wharf-executor")
    run.add_argument("--profile", default="unknown", help="cargo profile of the binaries, for the caption")
    run.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    run.add_argument("--nats-server", default=shutil.which("nats-server") or "/usr/sbin/nats-server")
    run.add_argument("--data-out", required=True, help="where to save the query results (JSON)")
    run.add_argument("--keep", action="store_true", help="keep the work dir (logs, Prometheus data)")
    ren = sub.add_parser("render", parents=[common], help="render again from saved query results")
    ren.add_argument("--data", required=True)
    args = ap.parse_args()
    args.repo = repo
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    (cmd_run if args.cmd == "run" else cmd_render)(args)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, TimeoutError, OSError) as e:
        sys.exit(f"render-dashboard: {e}")
