#!/usr/bin/env python3
"""Writes the scenario logs of the seeds-behaviour corrections (restarts, forced outage,
two zones, cloud brokering). Each is named by its requirement ID; `scenarios.rs` asserts
what the requirement says and checks the outputs against `NAME.expected.jsonl`
(regenerate those with `LHC_BLESS=1 cargo test --release -p lhc-engine --test scenarios`
and review the diff).

    python3 engine/tests/scenarios/make.py     # rewrites the logs listed at the bottom

Time is seconds after 2026-01-05T09:00:00Z. A "minute" of a healthy connector is a health
check, a StoreFront heartbeat and an ok probe of each peer that is up, in that order.
"""

import json
import os
from datetime import datetime, timedelta, timezone

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=timezone.utc)
HERE = os.path.dirname(os.path.abspath(__file__))

A, B, C = "cc-a.z1.example", "cc-b.z1.example", "cc-c.z1.example"
D = "cc-d.z2.example"


def ts(seconds):
    t = T0 + timedelta(milliseconds=round(seconds * 1000))
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def up(kind, id, data=None):
    op = {"op": "upsert", "kind": kind, "id": id}
    if data is not None:
        op["data"] = data
    return op


class Log:
    def __init__(self):
        self.records = []

    def add(self, t, type, **fields):
        rec = {"ts": ts(t), "type": type}
        rec.update(fields)
        self.records.append((t, len(self.records), rec))

    def config(self, t, version, ops):
        self.add(t, "config.change", version=version, ops=ops)

    def health(self, t, c, ok):
        self.add(t, "health.check", connector=c, ok=ok)

    def storefront(self, t, c):
        self.add(t, "storefront.heartbeat", connector=c, storefront="sf1.example")

    def probe(self, t, c, peer, ok):
        self.add(t, "peer.probe", connector=c, peer=peer, ok=ok)

    def vda(self, t, m, sessions=()):
        self.add(t, "vda.heartbeat", machine=m, sessions=list(sessions))

    def launch(self, t, request, c, user, resource):
        self.add(t, "launch.request", request=request, connector=c, user=user,
                 resource=resource, client={"name": "pc-" + user, "ip": "10.0.0.9"})

    def life(self, t, c, event):
        self.add(t, "connector.lifecycle", connector=c, event=event)

    def admin(self, t, c, command):
        self.add(t, "admin.command", connector=c, command=command)

    def params(self, t, **p):
        self.add(t, "engine.params", **p)

    def tick(self, t):
        self.add(t, "clock.tick")

    def minutes(self, start, end, connectors, ok, down=(), storefront=True, peers=None):
        """Every 60 s from `start` (inclusive) to `end` (exclusive): each connector not in
        `down` checks (`ok` may be a function of time), hears StoreFront and probes its
        peers (ok unless the peer is down)."""
        t = start
        while t < end:
            for i, c in enumerate(connectors):
                if c in down:
                    continue
                base = t + i * 0.1
                self.health(base, c, ok(t) if callable(ok) else ok)
                if storefront:
                    self.storefront(base + 0.01, c)
                for p in (peers if peers is not None else connectors):
                    if p != c:
                        self.probe(base + 0.02, c, p, p not in down)
            t += 60

    def write(self, name):
        rows = sorted(self.records, key=lambda r: (r[0], r[1]))
        with open(os.path.join(HERE, name + ".jsonl"), "w") as f:
            for _, _, rec in rows:
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")


def site(connectors=(A, B), extra=(), site_data=None):
    """One zone z1 (and z2), the given connectors, two multi-session VDAs in z1."""
    ops = [up("site", "site", site_data)]
    ops += [up("zone", "z1", {"name": "Zone 1"}), up("zone", "z2", {"name": "Zone 2"})]
    for c in connectors:
        ops.append(up("connector", c, {"zone": "z2" if ".z2." in c else "z1"}))
    ops += [
        up("delivery_group", "dg-apps", {"kind": "multi_session"}),
        up("machine", "vda-1.z1.example", {"zone": "z1", "delivery_group": "dg-apps"}),
        up("machine", "vda-2.z1.example", {"zone": "z1", "delivery_group": "dg-apps"}),
        up("resource", "app", {"kind": "application", "delivery_groups": ["dg-apps"]}),
        up("user", "alice"),
        up("entitlement", "e1", {"resource": "app", "principals": ["alice"]}),
    ]
    return ops + list(extra)


def outage(ok_until, back_at):
    return lambda t: t < ok_until or t >= back_at


def restart_elected():
    """R-STATE-10: the elected broker (A) restarts during the outage; B takes over
    (failover); A's first failed check after its start takes it straight back to
    initial_ha, it is elected again and VDAs re-register with it (failback)."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 1500)
    log.minutes(1, 600, [A, B], ok)
    log.vda(200, "vda-1.z1.example")
    log.launch(230, "r1", A, "alice", "app")
    log.life(600, A, "stop")
    log.minutes(601, 700, [A, B], ok, down=[A])
    log.vda(650, "vda-1.z1.example")
    log.launch(655, "r2", B, "alice", "app")
    log.life(700, A, "start")
    log.storefront(705, A)  # StoreFront reaches it before its first check
    log.minutes(721, 2400, [A, B], ok)
    log.vda(800, "vda-1.z1.example")
    log.launch(805, "r3", A, "alice", "app")
    log.launch(806, "r4", B, "alice", "app")
    log.vda(2300, "vda-1.z1.example")
    log.write("r-state-10-restart-elected")


def restart_non_elected():
    """R-STATE-10, R-REG-1: the non-elected connector (B) restarts during the outage: no
    impact. Before its first check it offers no cloud path, so the VDA stays with A; its
    first failed check takes it back to LHC mode (non-elected) at once."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 1500)
    log.minutes(1, 600, [A, B], ok)
    log.vda(200, "vda-1.z1.example")
    log.life(600, B, "stop")
    log.minutes(601, 700, [A, B], ok, down=[B])
    log.life(700, B, "start")
    log.probe(705, B, A, True)  # it probes its peer before its first check
    log.vda(710, "vda-1.z1.example")  # B started, no check yet: stays with A
    log.launch(712, "r1", A, "alice", "app")
    log.storefront(715, B)
    log.minutes(721, 1300, [A, B], ok)
    log.vda(800, "vda-1.z1.example")
    log.launch(805, "r2", A, "alice", "app")
    log.write("r-state-10-restart-non-elected")


def blackout():
    """R-STATE-10: A, first in FQDN order, is powered off in normal operations and powered
    on during the outage: its first check fails, its snapshot is unusable, yet B elects it
    (its probes of A are ok): nobody brokers, the documented blackout."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(300, 1800)
    log.minutes(1, 120, [A, B], ok)
    log.life(120, A, "stop")
    log.minutes(121, 600, [A, B], ok, down=[A])
    log.vda(500, "vda-1.z1.example")
    log.launch(510, "r1", B, "alice", "app")
    log.life(600, A, "start")
    log.storefront(605, A)
    log.minutes(661, 1500, [A, B], ok)
    log.vda(800, "vda-1.z1.example")
    log.launch(810, "r2", B, "alice", "app")
    log.launch(811, "r3", A, "alice", "app")
    log.write("r-state-10-blackout")


def css_restart():
    """R-CSS-1: a config change lands during the outage; B restarts. Its first sync check
    waits for its first health check after the start, which fails: 510, and it never
    imports version 2 (the cloud is out of reach)."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 1500)
    log.minutes(1, 500, [A, B], ok)
    log.config(400, 2, [up("user", "bob")])
    log.life(500, B, "stop")
    log.life(560, B, "start")
    log.storefront(565, B)
    log.minutes(601, 1400, [A, B], ok)
    log.write("r-css-1-restart")


def pending_no_pull():
    """R-REG-1: B cannot enter LHC mode (no StoreFront traffic reaches it) and waits in
    pending_ha; A brokers. The VDA stays with A: a pending_ha connector offers the cloud
    path only while no connector of the zone is in LHC mode (the detection gap, when the
    VDA stays with the cloud)."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 3000)
    log.vda(30, "vda-1.z1.example")
    log.minutes(1, 900, [A], ok, peers=[A, B])
    t = 1.1
    while t < 900:
        log.health(t, B, ok(t))
        log.probe(t + 0.02, B, A, True)
        t += 60
    log.vda(90, "vda-1.z1.example")  # detection gap: both pending_ha, still the cloud
    log.vda(400, "vda-1.z1.example")
    log.vda(700, "vda-1.z1.example")
    log.launch(705, "r1", A, "alice", "app")
    log.write("r-reg-1-pending")


def forced():
    """R-STATE-8: forcing a subset of the zone gives 3002 forced_on_subset; forcing the last
    connector brings the zone in at that record, in FQDN order. Held while forced (checks
    ok, yet LHC mode goes on); disabling moves to pending_recovery. Forcing again in
    pending_recovery stops the period; disabling then starts a full new one. The forced
    setting survives a restart."""
    log = Log()
    log.config(0, 1, site(connectors=(A, B, C)))
    log.minutes(1, 600, [A, B, C], True)
    log.admin(125, B, "enable_forced_outage")
    log.admin(185, C, "enable_forced_outage")
    log.admin(245, A, "enable_forced_outage")
    log.vda(300, "vda-1.z1.example")
    log.life(600, C, "stop")
    log.minutes(601, 700, [A, B, C], True, down=[C])
    log.life(630, C, "start")  # still forced: tried at the start, no StoreFront yet
    log.minutes(701, 3000, [A, B, C], True)
    log.admin(900, A, "disable_forced_outage")
    log.admin(1000, A, "enable_forced_outage")
    log.admin(1400, A, "disable_forced_outage")
    log.write("r-state-8")


def lowered_params():
    """R-STATE-8, R-STATE-9: lowering pending_recovery_s and peer_timeout_s fires the
    timers they made due at the record that lowered them, never in the past."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 700)
    log.minutes(1, 800, [A, B], ok)
    log.params(760.5, pending_recovery_s=30, peer_timeout_s=10)
    log.life(900, B, "stop")
    log.tick(1000)
    log.write("r-state-9-lowered-params")


def report_interval():
    """R-STATE-9, §9: a changed report_interval_s applies after the report already
    scheduled (as a sync period does): cc-a's first 3507 comes at the old interval, the
    next ones at the new."""
    log = Log()
    log.config(0, 1, site(connectors=(A,)))
    ok = outage(60, 700)
    log.minutes(1, 800, [A], ok)
    log.params(250.5, report_interval_s=30)
    log.tick(1000)
    log.write("r-state-9-report-interval")


def storefront_daas_only():
    """R-STATE-4: the StoreFront condition holds for "daas" only, and Service Continuity
    lifts it. Zone z1 is daas without StoreFront traffic (3002), then the site enables
    Service Continuity and the next failure streak enters LHC mode."""
    log = Log()
    log.config(0, 1, site(connectors=(A,)))
    ok = outage(60, 400)
    log.minutes(1, 800, [A], ok, storefront=False)
    log.config(500, 2, [up("site", "site", {"service_continuity_enabled": True})])
    ok2 = lambda t: t < 820 or t >= 1500
    log.minutes(821, 1200, [A], ok2, storefront=False)
    log.write("r-state-4-daas-only")


def onprem():
    """R-STATE-4 and R-LAUNCH-6 for the on-premises profile: no StoreFront condition; pooled
    groups without shutdown_desktops_after_use can launch in an outage, those with it
    cannot."""
    log = Log()
    extra = [
        up("delivery_group", "dg-keep", {"kind": "single_session_pooled",
                                         "shutdown_desktops_after_use": False}),
        up("delivery_group", "dg-shut", {"kind": "single_session_pooled"}),
        up("machine", "p-keep.z1.example", {"zone": "z1", "delivery_group": "dg-keep"}),
        up("machine", "p-shut.z1.example", {"zone": "z1", "delivery_group": "dg-shut"}),
        up("resource", "desk-keep", {"kind": "desktop", "delivery_groups": ["dg-keep"]}),
        up("resource", "desk-shut", {"kind": "desktop", "delivery_groups": ["dg-shut"]}),
        up("entitlement", "e2", {"resource": "desk-keep", "principals": ["alice"]}),
        up("entitlement", "e3", {"resource": "desk-shut", "principals": ["alice"]}),
    ]
    log.config(0, 1, site(connectors=(A,), extra=extra, site_data={"profile": "onprem"}))
    ok = outage(60, 1200)
    log.minutes(1, 900, [A], ok, storefront=False)
    log.vda(400, "p-keep.z1.example")
    log.vda(401, "p-shut.z1.example")
    log.launch(410, "r-keep", A, "alice", "desk-keep")
    log.launch(411, "r-shut", A, "alice", "desk-shut")
    log.write("r-launch-6-onprem")


def cloud_site_wide():
    """§6.2 (cloud brokering): the registered machine with the fewest sessions site-wide,
    the resource's preferred zone first, ties in FQDN order; a static user without an
    assignment gets the first free machine of the group in FQDN order across zones."""
    log = Log()
    ops = [
        up("site", "site"),
        up("zone", "z1", {"name": "Zone 1"}), up("zone", "z2", {"name": "Zone 2"}),
        up("connector", A, {"zone": "z1"}), up("connector", D, {"zone": "z2"}),
        up("delivery_group", "dg-apps", {"kind": "multi_session"}),
        up("delivery_group", "dg-static", {"kind": "single_session_static"}),
        up("machine", "m1.z1.example", {"zone": "z1", "delivery_group": "dg-apps"}),
        up("machine", "m2.z2.example", {"zone": "z2", "delivery_group": "dg-apps"}),
        up("machine", "s-b.z1.example", {"zone": "z1", "delivery_group": "dg-static"}),
        up("machine", "s-a.z2.example", {"zone": "z2", "delivery_group": "dg-static"}),
        up("resource", "app", {"kind": "application", "delivery_groups": ["dg-apps"]}),
        up("resource", "app-z2", {"kind": "application", "delivery_groups": ["dg-apps"],
                                  "zone_preference": "z2"}),
        up("resource", "desk", {"kind": "desktop", "delivery_groups": ["dg-static"],
                                "zone_preference": "z1"}),
        up("user", "alice"), up("user", "bob"), up("user", "carol"),
        up("entitlement", "e1", {"resource": "app", "principals": ["alice", "bob", "carol"]}),
        up("entitlement", "e2", {"resource": "app-z2", "principals": ["alice", "bob", "carol"]}),
        up("entitlement", "e3", {"resource": "desk", "principals": ["alice"]}),
        up("delivery_group", "dg-b", {"kind": "multi_session"}),
        up("machine", "m3.z2.example", {"zone": "z2", "delivery_group": "dg-b"}),
        up("resource", "app-two", {"kind": "application", "delivery_groups": ["dg-b", "dg-apps"],
                                   "zone_preference": "z1"}),
        up("entitlement", "e4", {"resource": "app-two", "principals": ["alice"]}),
    ]
    log.config(0, 1, ops)
    log.minutes(1, 300, [A, D], True, peers=[])
    log.vda(10, "m1.z1.example", [{"id": "s1", "user": "bob", "state": "active"}])
    log.vda(11, "m2.z2.example")
    log.vda(12, "s-b.z1.example")
    log.vda(13, "s-a.z2.example")
    log.vda(14, "m3.z2.example")
    # m1 (z1) has a session, m2 (z2) none: the fewest sessions site-wide is m2, though
    # the request came through z1's connector.
    log.launch(20, "r1", A, "alice", "app")
    # Both now hold one session: the tie goes to FQDN order (m1 before m2).
    log.vda(30, "m2.z2.example", [{"id": "s2", "user": "alice", "state": "active"}])
    log.launch(40, "r2", A, "carol", "app")
    # Zone preference z2 wins over fewer sessions elsewhere.
    log.vda(50, "m1.z1.example", [{"id": "s1", "user": "bob", "state": "active"}])
    log.vda(51, "m2.z2.example", [{"id": "s2", "user": "alice", "state": "active"},
                                  {"id": "s3", "user": "carol", "state": "active"},
                                  {"id": "s4", "user": "erin", "state": "active"}])
    log.launch(60, "r3", A, "bob", "app-z2")
    # Static: the first free machine in FQDN order across zones (s-a.z2 before s-b.z1),
    # whatever the preferred zone.
    log.launch(70, "r4", A, "alice", "desk")
    # Across the resource's groups too: dg-b (listed first) has an idle machine in z2, but
    # the preferred zone z1 has one in dg-apps.
    log.launch(80, "r5", A, "alice", "app-two")
    log.write("launch-cloud-site-wide")


def pending_expiry():
    """A brokered launch the VDA never reports stops counting as load at its 120 s
    deadline, not at the machine's next heartbeat."""
    log = Log()
    log.config(0, 1, site(connectors=(A,), extra=[
        up("machine", "vda-3.z1.example",
           {"zone": "z1", "delivery_group": "dg-apps", "max_sessions": 1}),
        up("user", "bob"), up("user", "carol"),
        up("entitlement", "e2", {"resource": "app", "principals": ["bob", "carol"]}),
    ]))
    log.minutes(1, 600, [A], True)
    # Only vda-3 registers (capacity 1).
    log.vda(10, "vda-3.z1.example")
    log.launch(20, "r1", A, "alice", "app")   # vda-3: pending, full
    log.launch(100, "r2", A, "bob", "app")    # full: machine_capacity
    log.launch(140, "r3", A, "carol", "app")  # 120 s after r1: it expired, vda-3 again
    log.write("launch-pending-expiry")


def split_brain():
    """R-ELECT-4, R-REG-2: A and B cannot probe each other; each elects itself and brokers.
    The VDA registers with the first in FQDN order (A); launches through B find no
    registered machine — the seeds' launch failures under split brain."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 3000)
    log.minutes(1, 61, [A, B], ok)
    t = 61
    while t < 900:
        for i, c in enumerate([A, B]):
            log.health(t + i * 0.1, c, ok(t))
            log.storefront(t + i * 0.1 + 0.01, c)
            log.probe(t + i * 0.1 + 0.02, c, B if c == A else A, False)
        t += 60
    log.vda(300, "vda-1.z1.example")
    log.vda(301, "vda-2.z1.example")
    log.launch(310, "r-a", A, "alice", "app")
    log.launch(311, "r-b", B, "alice", "app")
    log.write("r-elect-4-split-brain-launches")


def css3_ended():
    """R-CSS-3: an import during which an LHC episode started is abandoned with 507 and the
    previous snapshot stays in use, even though the episode ended before the import
    completed."""
    log = Log()
    log.params(0, initial_ha_s=60, pending_recovery_s=60)
    log.config(0.5, 1, site(connectors=(A,)))
    log.params(5, import_duration_s=600)
    ok = outage(330, 470)
    log.minutes(1, 1500, [A], ok)
    log.config(250, 2, [up("machine", "vda-9.z1.example",
                           {"zone": "z1", "delivery_group": "dg-apps"})])
    log.write("r-css-3-episode-ended")


def disable_unforced():
    """R-STATE-8, R-STATE-5, R-STATE-6: `disable_forced_outage` only ends a forced outage.
    In a real one, run on connectors that were never forced (A in initial_ha, B in
    extended_ha), it changes nothing: A's initial_ha ends at its first check after 300 s,
    B stays in extended_ha until an ok check."""
    log = Log()
    log.config(0, 1, site())
    ok = outage(60, 1500)
    log.minutes(1, 2400, [A, B], ok)
    log.admin(200, A, "disable_forced_outage")
    log.admin(700, B, "disable_forced_outage")
    log.write("r-state-8-disable-unforced")


if __name__ == "__main__":
    for make in [restart_elected, restart_non_elected, blackout, css_restart, pending_no_pull,
                 forced, lowered_params, report_interval, storefront_daas_only, onprem, cloud_site_wide,
                 pending_expiry, split_brain, css3_ended, disable_unforced]:
        make()
