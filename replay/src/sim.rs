//! `lhc simulate`: a seeded generator of realistic site logs.
//!
//! Invariants: the same options and seed give the same records, byte for byte (one ChaCha8
//! stream, events ordered by (time, sequence), no hash-order iteration); records come out
//! in time order; every record is a valid one (built as typed records and encoded). The
//! generator runs the engine on what it emits so that StoreFront sends launches where a load
//! balancer would (the elected broker during an outage) and sessions start on the machines
//! the brokers chose — as in a real site, the VDAs report what brokering decided.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use lhc_engine::build::SiteBuilder;
use lhc_engine::config::{DeliveryGroupKind, ObjectKind, SiteData};
use lhc_engine::output::{Outcome, Reason, SessionKind};
use lhc_engine::record::{
    AdminCommand, AdminCommandName, Client, ConnectorLifecycle, HealthCheck, LaunchRequest,
    LifecycleEvent, PeerProbe, SessionEvent, SessionEventKind, SessionReport, SessionState,
    StorageFault, StorefrontHeartbeat, VdaHeartbeat,
};
use lhc_engine::{encode_record, Engine, Output, Record, Ts};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

/// Kinds of configuration mistake that make an import fail (505) in practice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadConfig {
    /// A machine whose delivery group does not exist.
    DanglingReference,
    /// A user deleted while a static assignment still names it.
    OrphanedAccount,
    /// A user whose id differs from another's only in case.
    DuplicateName,
}

/// A scenario event, times in seconds from the start.
#[derive(Clone, Debug, PartialEq)]
pub enum Scenario {
    /// The control plane is unreachable for every connector.
    CloudOutage { start_s: u64, duration_s: u64 },
    /// The control plane answers every other period (network flapping).
    Flapping {
        start_s: u64,
        duration_s: u64,
        period_s: u64,
    },
    /// Connectors cannot probe each other (election channel cut): split brain.
    Partition { start_s: u64, duration_s: u64 },
    /// A connector machine stops, then starts again.
    ConnectorStop {
        connector: String,
        start_s: u64,
        duration_s: u64,
    },
    /// Forced outage on some connectors: a zone's (`z1`), one connector's (`z1c2` or its
    /// FQDN), or all when `zone` is None.
    ForcedOutage {
        zone: Option<String>,
        start_s: u64,
        duration_s: u64,
    },
    /// A configuration change that breaks the import.
    BadConfig { at_s: u64, kind: BadConfig },
    /// A connector's local store fails; its next import fails.
    StorageFault { connector: String, at_s: u64 },
}

impl Scenario {
    /// Its option name and its span in seconds from the start of the log.
    fn window(&self) -> (&'static str, u64, u64) {
        let option = match self {
            Scenario::CloudOutage { .. } => "--outage",
            Scenario::Flapping { .. } => "--flap",
            Scenario::Partition { .. } => "--partition",
            Scenario::ConnectorStop { .. } => "--stop",
            Scenario::ForcedOutage { .. } => "--forced-outage",
            Scenario::BadConfig { .. } => "--bad-config",
            Scenario::StorageFault { .. } => "--storage-fault",
        };
        let (from, length) = scenario_window(self);
        (option, from, from + length.unwrap_or(0))
    }
}

/// Seconds as h:mm:ss, for messages.
fn clock(s: u64) -> String {
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Seed of the random stream.
    pub seed: u64,
    /// Zones.
    pub zones: usize,
    /// Connectors per zone.
    pub connectors_per_zone: usize,
    /// VDAs per zone (at most 10,000; 40,000 per site).
    pub vdas_per_zone: usize,
    /// Users.
    pub users: usize,
    /// Hours of site time.
    pub hours: f64,
    /// Logons per second, site-wide.
    pub logon_rate: f64,
    /// Mean session length, minutes.
    pub session_minutes: f64,
    /// Start of the log.
    pub start: Ts,
    /// VDA registration heartbeat period (the VDAs heartbeat every half period).
    pub heartbeat_period_ms: u64,
    /// Scenario events.
    pub scenarios: Vec<Scenario>,
    /// Configuration versions start after this one (a simulation appended to a log that
    /// already holds configuration changes continues their numbering).
    pub version_base: u64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seed: 1,
            zones: 2,
            connectors_per_zone: 3,
            vdas_per_zone: 2_000,
            users: 5_000,
            hours: 2.0,
            logon_rate: 1.0,
            session_minutes: 45.0,
            start: Ts(1_767_603_600_000), // 2026-01-05T09:00:00Z
            heartbeat_period_ms: 600_000,
            scenarios: Vec::new(),
            version_base: 0,
        }
    }
}

/// Errors in the options.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An option is out of range; the message says which and why.
    #[error("{0}")]
    Options(String),
}

/// What happens next in the simulation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A connector's minute: health check, StoreFront heartbeat, peer probes.
    ConnectorMinute(usize),
    /// A VDA's heartbeat.
    Vda(usize),
    /// A user logs on (Poisson arrivals).
    Logon,
    /// A brokered launch becomes a session on its machine.
    SessionStart {
        machine: usize,
        session: String,
        user: String,
        reconnect: bool,
    },
    /// A session ends.
    SessionEnd { machine: usize, session: String },
    /// Scenario step `index` (start, or end when `end`).
    Scenario { index: usize, end: bool },
}

struct Machine {
    name: String,
    zone: usize,
    sessions: Vec<SessionReport>,
}

/// The generator. Call [`Simulator::run`] with a sink for the records.
pub struct Simulator {
    options: SimOptions,
    rng: ChaCha8Rng,
    engine: Engine,
    offset: u64,
    queue: BinaryHeap<Reverse<(i64, u64, Event)>>,
    seq: u64,
    connectors: Vec<(String, usize)>,
    machines: Vec<Machine>,
    /// Resources each user may launch: (resource, zones holding it).
    user_resources: Vec<Vec<usize>>,
    resources: Vec<(String, Vec<usize>)>,
    version: u64,
    requests: u64,
    sessions: u64,
    // Scenario state.
    cloud_down: u32,
    flapping: Option<u64>,
    partitioned: u32,
    stopped: BTreeMap<usize, u32>,
    out: Vec<Output>,
}

impl Simulator {
    /// Checks the options and builds the site.
    pub fn new(options: SimOptions) -> Result<Simulator, SimError> {
        let bad = |m: String| Err(SimError::Options(m));
        if options.zones == 0 || options.connectors_per_zone == 0 {
            return bad("--zones and --connectors-per-zone must be at least 1".into());
        }
        if options.vdas_per_zone > 10_000 {
            return bad(format!(
                "--vdas-per-zone {} exceeds the 10,000 VDAs a zone supports",
                options.vdas_per_zone
            ));
        }
        if options.vdas_per_zone * options.zones > 40_000 {
            return bad(format!(
                "{} VDAs exceed the 40,000 a site supports with LHC",
                options.vdas_per_zone * options.zones
            ));
        }
        if options.users == 0 {
            return bad("--users must be at least 1".into());
        }
        if !(options.logon_rate >= 0.0 && options.logon_rate.is_finite()) {
            return bad("--logon-rate must be a number of logons per second >= 0".into());
        }
        if !(options.hours > 0.0 && options.hours <= 24.0 * 31.0) {
            return bad("--hours must be in (0, 744]".into());
        }
        if !(options.session_minutes > 0.0 && options.session_minutes <= 100_000.0) {
            return bad("--session-minutes must be a number of minutes in (0, 100000]".into());
        }
        // R-CSS-4's range: outside it every import of the simulated site fails (505).
        if !(60_000..=3_600_000).contains(&options.heartbeat_period_ms) {
            return bad(format!(
                "--heartbeat-period must be from 1m to 1h (the range a configuration may \
                 hold, R-CSS-4), not {} ms: outside it every import fails",
                options.heartbeat_period_ms
            ));
        }
        // Record times must stay within RFC 3339's four-digit years.
        const LAST_MS: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        let end_ms = options.start.millis() + (options.hours * 3_600_000.0) as i64;
        if options.start.millis() < 0 || end_ms > LAST_MS {
            return bad(format!(
                "--start {} with --hours {} leaves the years 1970..=9999 the simulator writes",
                options.start, options.hours
            ));
        }
        // A scenario the log never reaches would leave the admin believing it was simulated.
        let span_s = (options.hours * 3600.0) as u64;
        for scenario in &options.scenarios {
            let (what, from, to) = scenario.window();
            let instant = matches!(
                scenario,
                Scenario::BadConfig { .. } | Scenario::StorageFault { .. }
            );
            if !instant && to == from {
                return bad(format!(
                    "{what} at {} lasts 0 s: give it a duration",
                    clock(from)
                ));
            }
            if let Scenario::Flapping { period_s: 0, .. } = scenario {
                return bad("--flap needs a period of at least 1 s (START+DURATION/PERIOD)".into());
            }
            if to > span_s || from >= span_s {
                return bad(format!(
                    "{what} at {}..{} lies outside the simulated {} (--hours {}): shorten or \
                     move it, or raise --hours",
                    clock(from),
                    clock(to),
                    clock(span_s),
                    options.hours
                ));
            }
        }
        let rng = ChaCha8Rng::seed_from_u64(options.seed);
        let mut connectors = Vec::new();
        for z in 0..options.zones {
            for c in 0..options.connectors_per_zone {
                connectors.push((format!("cc{}.z{}.sim.example", c + 1, z + 1), z));
            }
        }
        let mut machines = Vec::new();
        for z in 0..options.zones {
            for i in 0..options.vdas_per_zone {
                machines.push(Machine {
                    name: machine_name(z, i, options.vdas_per_zone),
                    zone: z,
                    sessions: Vec::new(),
                });
            }
        }
        Ok(Simulator {
            rng,
            engine: Engine::new(),
            offset: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            connectors,
            machines,
            user_resources: Vec::new(),
            resources: Vec::new(),
            version: 0,
            requests: 0,
            sessions: 0,
            cloud_down: 0,
            flapping: None,
            partitioned: 0,
            stopped: BTreeMap::new(),
            out: Vec::new(),
            options,
        })
    }

    fn push(&mut self, at: i64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, event)));
    }

    /// Emits every record, in time order, to `sink`; `progress` gets the fraction of site
    /// time done now and then. Returns the number of records.
    pub fn run(
        mut self,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
        progress: &mut dyn FnMut(f64),
    ) -> Result<u64, String> {
        let t0 = self.options.start.millis();
        let end = t0 + (self.options.hours * 3_600_000.0) as i64;
        let config = self.initial_config();
        self.emit(config, sink)?;
        // Connectors: one record burst a minute each, spread over the minute.
        let n = self.connectors.len();
        for i in 0..n {
            let at = t0 + 1_000 + (i as i64 * 60_000 / n as i64);
            self.push(at, Event::ConnectorMinute(i));
        }
        // VDAs: every half period, evenly spread, with jitter.
        let half = (self.options.heartbeat_period_ms / 2).max(1_000) as i64;
        for i in 0..self.machines.len() {
            let at = t0 + 5_000 + self.rng.random_range(0..half);
            self.push(at, Event::Vda(i));
        }
        if self.options.logon_rate > 0.0 {
            let first = t0 + 30_000 + self.next_arrival_ms();
            self.push(first, Event::Logon);
        }
        for (index, s) in self.options.scenarios.clone().iter().enumerate() {
            let (start, duration) = scenario_window(s);
            self.push(
                t0 + start as i64 * 1000,
                Event::Scenario { index, end: false },
            );
            if let Some(d) = duration {
                self.push(
                    t0 + (start + d) as i64 * 1000,
                    Event::Scenario { index, end: true },
                );
            }
        }
        let mut last_progress = t0;
        while let Some(Reverse((at, _, event))) = self.queue.pop() {
            if at >= end {
                break;
            }
            if at - last_progress > 60_000 {
                progress((at - t0) as f64 / (end - t0) as f64);
                last_progress = at;
            }
            self.step(Ts(at), event, sink)?;
        }
        progress(1.0);
        Ok(self.offset)
    }

    fn next_arrival_ms(&mut self) -> i64 {
        let exp = Exp::new(self.options.logon_rate).expect("rate checked positive");
        (exp.sample(&mut self.rng) * 1000.0).ceil() as i64
    }

    /// Applies `record` to the simulator's engine and hands its bytes to the sink.
    fn emit(
        &mut self,
        record: Record,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let bytes = encode_record(&record);
        self.out.clear();
        self.engine.apply(self.offset, Ok(record), &mut self.out);
        self.offset += 1;
        sink(&bytes)
    }

    fn step(
        &mut self,
        ts: Ts,
        event: Event,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        match event {
            Event::ConnectorMinute(i) => {
                self.push(ts.millis() + 60_000, Event::ConnectorMinute(i));
                if self.stopped.contains_key(&i) {
                    return Ok(());
                }
                let (name, zone) = self.connectors[i].clone();
                let ok = self.cloud_ok(ts);
                self.emit(
                    Record::HealthCheck(HealthCheck {
                        record_id: None,
                        ts,
                        connector: name.clone(),
                        ok,
                        detail: Some(if ok { "HTTP 200" } else { "timed out" }.into()),
                    }),
                    sink,
                )?;
                self.emit(
                    Record::StorefrontHeartbeat(StorefrontHeartbeat {
                        record_id: None,
                        ts,
                        connector: name.clone(),
                        storefront: format!("sf{}.z{}.sim.example", 1 + i % 2, zone + 1),
                    }),
                    sink,
                )?;
                let peers: Vec<(usize, String)> = self
                    .connectors
                    .iter()
                    .enumerate()
                    .filter(|(j, (_, z))| *z == zone && *j != i)
                    .map(|(j, (p, _))| (j, p.clone()))
                    .collect();
                for (j, peer) in peers {
                    let ok = self.partitioned == 0 && !self.stopped.contains_key(&j);
                    self.emit(
                        Record::PeerProbe(PeerProbe {
                            record_id: None,
                            ts,
                            connector: name.clone(),
                            peer,
                            ok,
                        }),
                        sink,
                    )?;
                }
            }
            Event::Vda(i) => {
                let half = (self.options.heartbeat_period_ms / 2).max(1_000) as i64;
                let jitter = self.rng.random_range(-(half / 20)..=(half / 20));
                self.push(ts.millis() + half + jitter, Event::Vda(i));
                let m = &self.machines[i];
                let record = Record::VdaHeartbeat(VdaHeartbeat {
                    record_id: None,
                    ts,
                    machine: m.name.as_str().into(),
                    sessions: m.sessions.clone(),
                });
                self.emit(record, sink)?;
            }
            Event::Logon => {
                let next = ts.millis() + self.next_arrival_ms().max(1);
                self.push(next, Event::Logon);
                self.launch(ts, sink)?;
            }
            Event::SessionStart {
                machine,
                session,
                user,
                reconnect,
            } => {
                let m = &mut self.machines[machine];
                let event = if reconnect {
                    if let Some(s) = m.sessions.iter_mut().find(|s| s.id == session) {
                        s.state = SessionState::Active;
                    }
                    SessionEventKind::Reconnect
                } else {
                    m.sessions.push(SessionReport {
                        id: session.as_str().into(),
                        user: user.as_str().into(),
                        state: SessionState::Active,
                    });
                    SessionEventKind::Logon
                };
                let record = Record::SessionEvent(SessionEvent {
                    record_id: None,
                    ts,
                    machine: m.name.clone(),
                    session: session.clone(),
                    user,
                    event,
                });
                self.emit(record, sink)?;
                let minutes = Exp::new(1.0 / self.options.session_minutes.max(1.0))
                    .expect("positive")
                    .sample(&mut self.rng);
                let end = ts.millis() + (minutes * 60_000.0) as i64 + 60_000;
                self.push(end, Event::SessionEnd { machine, session });
            }
            Event::SessionEnd { machine, session } => {
                let m = &mut self.machines[machine];
                let Some(pos) = m.sessions.iter().position(|s| s.id == session) else {
                    return Ok(());
                };
                let s = m.sessions.remove(pos);
                let record = Record::SessionEvent(SessionEvent {
                    record_id: None,
                    ts,
                    machine: m.name.clone(),
                    session: s.id.into(),
                    user: s.user.into(),
                    event: SessionEventKind::Logoff,
                });
                self.emit(record, sink)?;
            }
            Event::Scenario { index, end } => {
                let scenario = self.options.scenarios[index].clone();
                self.scenario(ts, &scenario, end, sink)?;
            }
        }
        Ok(())
    }

    fn cloud_ok(&self, ts: Ts) -> bool {
        if self.cloud_down > 0 {
            return false;
        }
        match self.flapping {
            Some(period_ms) => (ts.millis() / period_ms.max(1) as i64) % 2 == 0,
            None => true,
        }
    }

    /// A user launches one of their resources through StoreFront.
    fn launch(
        &mut self,
        ts: Ts,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let user = self.rng.random_range(0..self.options.users);
        let choices = &self.user_resources[user];
        if choices.is_empty() {
            return Ok(());
        }
        let resource = choices[self.rng.random_range(0..choices.len())];
        let (resource_id, zones) = self.resources[resource].clone();
        let zone = zones[self.rng.random_range(0..zones.len())];
        let Some(mut connector) = self.storefront_target(zone) else {
            return Ok(()); // every connector of the zone is down
        };
        self.requests += 1;
        let root = format!("r{}", self.requests);
        let user_id = user_name(user);
        let client = Client {
            name: format!("pc-{user:06}"),
            ip: format!(
                "10.{}.{}.{}",
                1 + user / 65_536,
                (user / 256) % 256,
                user % 256
            ),
        };
        // StoreFront tries the next Delivery Controller of its list when one refuses
        // (not elected, stopped); each attempt names the first (retry_of).
        let mut tried = vec![connector.clone()];
        let mut request = root.clone();
        let decision = loop {
            let record = Record::LaunchRequest(Box::new(LaunchRequest {
                record_id: None,
                ts,
                request: request.clone(),
                connector: connector.clone(),
                user: user_id.clone(),
                resource: resource_id.clone(),
                client: client.clone(),
                retry_of: (request != root).then(|| root.clone()),
            }));
            self.emit(record, sink)?;
            let decision = self.out.iter().find_map(|o| match o {
                Output::LaunchDecision(d) if d.request == request => Some(d.clone()),
                _ => None,
            });
            let refused = decision.as_ref().is_some_and(|d| {
                matches!(
                    d.reason,
                    Some(Reason::NotElected | Reason::ConnectorStopped)
                )
            });
            let next = (0..self.connectors.len())
                .map(|i| &self.connectors[i])
                .find(|(name, z)| *z == zone && !tried.contains(name))
                .map(|(name, _)| name.clone());
            match next {
                Some(next) if refused => {
                    tried.push(next.clone());
                    connector = next;
                    self.requests += 1;
                    request = format!("r{}", self.requests);
                }
                _ => break decision,
            }
        };
        let Some(d) = decision else { return Ok(()) };
        if d.outcome != Outcome::Brokered {
            return Ok(());
        }
        let Some(machine) = d
            .machine
            .as_ref()
            .and_then(|name| self.machines.iter().position(|m| &m.name == name))
        else {
            return Ok(());
        };
        let reconnect = d.session == Some(SessionKind::Reconnect);
        let session = if reconnect {
            self.machines[machine]
                .sessions
                .iter()
                .find(|s| s.user == user_id && s.state == SessionState::Disconnected)
                .map(|s| s.id.to_string())
        } else {
            None
        };
        let session = match session {
            Some(s) => s,
            None => {
                self.sessions += 1;
                format!("s{}", self.sessions)
            }
        };
        let delay = self.rng.random_range(2_000..10_000);
        self.push(
            ts.millis() + delay,
            Event::SessionStart {
                machine,
                session,
                user: user_id,
                reconnect,
            },
        );
        Ok(())
    }

    /// Where StoreFront sends a launch for `zone`: the broker the engine elected when the
    /// zone is in LHC mode (the load balancer's monitor marks the others down), else a
    /// random started connector of the zone.
    fn storefront_target(&mut self, zone: usize) -> Option<String> {
        let started: Vec<usize> = (0..self.connectors.len())
            .filter(|i| self.connectors[*i].1 == zone && !self.stopped.contains_key(i))
            .collect();
        if started.is_empty() {
            return None;
        }
        let brokering = started.iter().find(|i| {
            self.engine
                .connectors()
                .get(&self.connectors[**i].0)
                .is_some_and(|c| c.brokering())
        });
        let i = match brokering {
            Some(i) => *i,
            None => started[self.rng.random_range(0..started.len())],
        };
        Some(self.connectors[i].0.clone())
    }

    fn scenario(
        &mut self,
        ts: Ts,
        scenario: &Scenario,
        end: bool,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        match scenario {
            Scenario::CloudOutage { .. } => {
                overlap(&mut self.cloud_down, end);
            }
            Scenario::Flapping { period_s, .. } => {
                self.flapping = (!end).then_some(period_s * 1000);
            }
            Scenario::Partition { .. } => {
                overlap(&mut self.partitioned, end);
            }
            Scenario::ConnectorStop { connector, .. } => {
                let i = self.connector_index(connector)?;
                let name = self.connectors[i].0.clone();
                if end {
                    self.stopped.remove(&i);
                } else {
                    self.stopped.insert(i, 1);
                }
                let event = if end {
                    LifecycleEvent::Start
                } else {
                    LifecycleEvent::Stop
                };
                self.emit(
                    Record::ConnectorLifecycle(ConnectorLifecycle {
                        record_id: None,
                        ts,
                        connector: name,
                        event,
                    }),
                    sink,
                )?;
            }
            Scenario::ForcedOutage { zone, .. } => {
                // A zone (z1), all (None), or one connector (z1c2 or its FQDN).
                let targets: Vec<String> = match zone {
                    Some(name) => match self.zone_index(name) {
                        Ok(z) => self
                            .connectors
                            .iter()
                            .filter(|(_, cz)| *cz == z)
                            .map(|(n, _)| n.clone())
                            .collect(),
                        Err(_) => vec![self.connectors[self.connector_index(name)?].0.clone()],
                    },
                    None => self.connectors.iter().map(|(n, _)| n.clone()).collect(),
                };
                let command = if end {
                    AdminCommandName::DisableForcedOutage
                } else {
                    AdminCommandName::EnableForcedOutage
                };
                for connector in targets {
                    self.emit(
                        Record::AdminCommand(AdminCommand {
                            record_id: None,
                            ts,
                            connector,
                            command,
                            seconds: None,
                        }),
                        sink,
                    )?;
                }
            }
            Scenario::BadConfig { kind, .. } => {
                let record = self.bad_config(ts, *kind);
                self.emit(record, sink)?;
            }
            Scenario::StorageFault { connector, .. } => {
                let i = self.connector_index(connector)?;
                let name = self.connectors[i].0.clone();
                self.emit(
                    Record::StorageFault(StorageFault {
                        record_id: None,
                        ts,
                        connector: name,
                        detail: "simulated: the local database file is unreadable".into(),
                    }),
                    sink,
                )?;
            }
        }
        Ok(())
    }

    /// A connector by FQDN or by short name like `z1c2` (zone 1, connector 2).
    fn connector_index(&self, name: &str) -> Result<usize, String> {
        if let Some(i) = self
            .connectors
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return Ok(i);
        }
        let short = name.trim_start_matches('z');
        if let Some((z, c)) = short.split_once('c') {
            if let (Ok(z), Ok(c)) = (z.parse::<usize>(), c.parse::<usize>()) {
                let found = self
                    .connectors
                    .iter()
                    .position(|(n, _)| *n == format!("cc{c}.z{z}.sim.example"));
                if let Some(i) = found {
                    return Ok(i);
                }
            }
        }
        Err(format!(
            "no connector {name:?} in the simulated site (names look like cc1.z1.sim.example or z1c1)"
        ))
    }

    fn zone_index(&self, name: &str) -> Result<usize, String> {
        name.trim_start_matches('z')
            .parse::<usize>()
            .ok()
            .filter(|z| (1..=self.options.zones).contains(z))
            .map(|z| z - 1)
            .ok_or_else(|| format!("no zone {name:?} (zones are z1..z{})", self.options.zones))
    }

    /// The site as of version 1: zones, connectors, three delivery groups per zone (multi
    /// session, pooled, static), machines, users in groups, resources, entitlements, and
    /// static assignments.
    fn initial_config(&mut self) -> Record {
        let o = self.options.clone();
        let mut site = SiteBuilder::new()
            .site(SiteData {
                heartbeat_period_ms: o.heartbeat_period_ms,
                ..SiteData::default()
            })
            .user_group("staff");
        let departments = 10;
        for d in 0..departments {
            site = site.user_group(&format!("dept{d}"));
        }
        for (name, zone) in &self.connectors {
            site = site.connector(name, &format!("z{}", zone + 1));
        }
        // Resources: one app spanning every zone; a pooled and a static desktop per zone.
        self.resources
            .push(("office".into(), (0..o.zones).collect()));
        for z in 0..o.zones {
            let n = z + 1;
            site = site
                .zone_named(&format!("z{n}"), &format!("Zone {n}"))
                .group(&format!("apps-z{n}"), DeliveryGroupKind::MultiSession)
                .group(
                    &format!("pool-z{n}"),
                    DeliveryGroupKind::SingleSessionPooled,
                )
                .group(
                    &format!("static-z{n}"),
                    DeliveryGroupKind::SingleSessionStatic,
                );
            self.resources
                .push((format!("pooled-desktop-z{n}"), vec![z]));
            self.resources
                .push((format!("static-desktop-z{n}"), vec![z]));
        }
        let apps: Vec<String> = (0..o.zones).map(|z| format!("apps-z{}", z + 1)).collect();
        let apps: Vec<&str> = apps.iter().map(String::as_str).collect();
        site = site
            .application("office", &apps)
            .entitlement("office-staff", "office", &["staff"]);
        let mut static_machines: Vec<Vec<usize>> = vec![Vec::new(); o.zones];
        for (i, m) in self.machines.iter().enumerate() {
            let z = m.zone;
            let local = i % o.vdas_per_zone.max(1);
            let (group, max) = match machine_role(local, o.vdas_per_zone) {
                Role::Server => ("apps", Some(20)),
                Role::Pooled => ("pool", None),
                Role::Static => {
                    static_machines[z].push(i);
                    ("static", None)
                }
            };
            let n = z + 1;
            site = site.machine(&m.name, &format!("z{n}"), &format!("{group}-z{n}"), max);
        }
        for z in 0..o.zones {
            let n = z + 1;
            // Pooled desktops for two departments per zone.
            let depts: Vec<String> = (0..departments)
                .filter(|d| d % o.zones == z)
                .map(|d| format!("dept{d}"))
                .collect();
            let depts: Vec<&str> = depts.iter().map(String::as_str).collect();
            site = site
                .desktop(&format!("pooled-desktop-z{n}"), &[&format!("pool-z{n}")])
                .desktop(&format!("static-desktop-z{n}"), &[&format!("static-z{n}")])
                .entitlement(
                    &format!("pooled-z{n}"),
                    &format!("pooled-desktop-z{n}"),
                    &depts,
                );
        }
        // Users: everyone in staff and one department; the first ones own a static desktop.
        self.user_resources = vec![vec![0]; o.users];
        let mut assigned = 0usize;
        let mut next_static = vec![0usize; o.zones];
        let mut static_entitled: Vec<Vec<String>> = vec![Vec::new(); o.zones];
        for u in 0..o.users {
            let dept = u % departments;
            site = site.user(&user_name(u), &["staff", &format!("dept{dept}")]);
            let zone = dept % o.zones;
            self.user_resources[u].push(1 + 2 * zone);
            if let Some(&machine) = static_machines[zone].get(next_static[zone]) {
                next_static[zone] += 1;
                assigned += 1;
                site = site.assignment(
                    &format!("a{assigned}"),
                    &self.machines[machine].name,
                    &user_name(u),
                );
                static_entitled[zone].push(user_name(u));
                self.user_resources[u].push(2 + 2 * zone);
            }
        }
        for (z, users) in static_entitled.iter().enumerate() {
            if users.is_empty() {
                continue;
            }
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            let n = z + 1;
            site = site.entitlement(
                &format!("static-z{n}"),
                &format!("static-desktop-z{n}"),
                &users,
            );
        }
        self.version = o.version_base + 1;
        site.change(o.start, self.version)
    }

    /// A configuration change with one of the mistakes that fail imports in practice.
    fn bad_config(&mut self, ts: Ts, kind: BadConfig) -> Record {
        self.version += 1;
        let change = match kind {
            BadConfig::DanglingReference => SiteBuilder::new().machine(
                &format!("new-vda-{}.sim.example", self.version),
                "z1",
                "retired-group",
                None,
            ),
            BadConfig::OrphanedAccount => SiteBuilder::new().delete(
                ObjectKind::User,
                &self.assigned_user().unwrap_or_else(|| user_name(0)),
            ),
            BadConfig::DuplicateName => {
                SiteBuilder::new().user(&user_name(0).to_uppercase(), &["staff"])
            }
        };
        change.change(ts, self.version)
    }

    /// A user a static assignment names, if any.
    fn assigned_user(&self) -> Option<String> {
        self.user_resources
            .iter()
            .position(|r| r.len() > 2)
            .map(user_name)
    }
}

enum Role {
    Server,
    Pooled,
    Static,
}

/// Half the machines are servers, 30 % pooled desktops, 20 % static desktops.
fn machine_role(local: usize, per_zone: usize) -> Role {
    let share = local * 10 / per_zone.max(1);
    match share {
        0..=4 => Role::Server,
        5..=7 => Role::Pooled,
        _ => Role::Static,
    }
}

fn machine_name(zone: usize, local: usize, per_zone: usize) -> String {
    let prefix = match machine_role(local, per_zone) {
        Role::Server => "srv",
        Role::Pooled => "vdi",
        Role::Static => "pc",
    };
    format!("{prefix}{local:05}.z{}.sim.example", zone + 1)
}

fn user_name(u: usize) -> String {
    format!("user{u:06}")
}

/// (start, duration) of a scenario, seconds.
fn scenario_window(s: &Scenario) -> (u64, Option<u64>) {
    match s {
        Scenario::CloudOutage {
            start_s,
            duration_s,
        }
        | Scenario::Flapping {
            start_s,
            duration_s,
            ..
        }
        | Scenario::Partition {
            start_s,
            duration_s,
        }
        | Scenario::ConnectorStop {
            start_s,
            duration_s,
            ..
        }
        | Scenario::ForcedOutage {
            start_s,
            duration_s,
            ..
        } => (*start_s, Some(*duration_s)),
        Scenario::BadConfig { at_s, .. } | Scenario::StorageFault { at_s, .. } => (*at_s, None),
    }
}

/// Counts a scenario that overlaps others of its kind: one more at its start, one less at
/// its end (the effect lasts while any is running).
fn overlap(running: &mut u32, end: bool) {
    if end {
        *running -= 1;
    } else {
        *running += 1;
    }
}
