//! Typed builders of sites and records, for tests and benchmarks: a configuration is put
//! together object by object and every record is a typed `Record`, encoded as the log
//! holds it (`encode_record`), instead of JSON written by hand in each test.
//!
//! Invariant: what a builder makes passes the record contract (the decoder accepts every
//! line it encodes); it decides nothing and reads no clock: times are given.

use crate::config::{
    AssignmentData, ConfigObject, ConfigOp, ConnectorData, DeliveryGroupData, DeliveryGroupKind,
    EntitlementData, GroupData, MachineData, ObjectKind, ObjectRef, ResourceData, ResourceKind,
    SiteData, UserData, ZoneData,
};
use crate::record::{
    Client, ConfigChange, HealthCheck, LaunchRequest, PeerProbe, Record, SessionReport,
    SessionState, StorefrontHeartbeat, VdaHeartbeat,
};
use crate::{encode_record, Ts};

/// A site configuration, object by object, in the order the ops are applied.
#[derive(Clone, Debug, Default)]
pub struct SiteBuilder {
    ops: Vec<ConfigOp>,
}

impl SiteBuilder {
    /// No objects yet.
    pub fn new() -> SiteBuilder {
        SiteBuilder::default()
    }

    /// Any object.
    pub fn object(mut self, object: ConfigObject) -> SiteBuilder {
        self.ops.push(ConfigOp::Upsert(object));
        self
    }

    /// The site settings.
    pub fn site(self, data: SiteData) -> SiteBuilder {
        self.object(ConfigObject::Site {
            id: "site".into(),
            data,
        })
    }

    /// A zone named after its id.
    pub fn zone(self, id: &str) -> SiteBuilder {
        self.object(ConfigObject::Zone {
            id: id.into(),
            data: ZoneData { name: id.into() },
        })
    }

    /// A connector of `zone`.
    pub fn connector(self, id: &str, zone: &str) -> SiteBuilder {
        self.object(ConfigObject::Connector {
            id: id.into(),
            data: ConnectorData { zone: zone.into() },
        })
    }

    /// A power-managed delivery group of `kind`, every other setting at its default.
    pub fn group(self, id: &str, kind: DeliveryGroupKind) -> SiteBuilder {
        self.object(ConfigObject::DeliveryGroup {
            id: id.into(),
            data: DeliveryGroupData {
                kind,
                power_managed: true,
                shutdown_desktops_after_use: None,
                reuse_machines_without_shutdown_in_outage: None,
                session_limit_per_user: None,
                restrict_to_tag: None,
            },
        })
    }

    /// A machine of `zone` and `group`; `max_sessions` `None` takes the group kind's
    /// default.
    pub fn machine(
        self,
        id: &str,
        zone: &str,
        group: &str,
        max_sessions: Option<u32>,
    ) -> SiteBuilder {
        self.object(ConfigObject::Machine {
            id: id.into(),
            data: MachineData {
                zone: zone.into(),
                delivery_group: group.into(),
                max_sessions,
                tags: Vec::new(),
                remote_pc: false,
                maintenance: false,
            },
        })
    }

    /// An application published from `groups`.
    pub fn application(self, id: &str, groups: &[&str]) -> SiteBuilder {
        self.resource(id, ResourceKind::Application, groups)
    }

    /// A desktop published from `groups`.
    pub fn desktop(self, id: &str, groups: &[&str]) -> SiteBuilder {
        self.resource(id, ResourceKind::Desktop, groups)
    }

    fn resource(self, id: &str, kind: ResourceKind, groups: &[&str]) -> SiteBuilder {
        self.object(ConfigObject::Resource {
            id: id.into(),
            data: ResourceData {
                kind,
                delivery_groups: groups.iter().map(|g| g.to_string()).collect(),
                zone_preference: None,
            },
        })
    }

    /// `machine` assigned to `user` (a static group's assignment).
    pub fn assignment(self, id: &str, machine: &str, user: &str) -> SiteBuilder {
        self.object(ConfigObject::Assignment {
            id: id.into(),
            data: AssignmentData {
                machine: machine.into(),
                user: user.into(),
            },
        })
    }

    /// A user in `groups`.
    pub fn user(self, id: &str, groups: &[&str]) -> SiteBuilder {
        self.object(ConfigObject::User {
            id: id.into(),
            data: UserData {
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
        })
    }

    /// A user group.
    pub fn user_group(self, id: &str) -> SiteBuilder {
        self.object(ConfigObject::Group {
            id: id.into(),
            data: GroupData {},
        })
    }

    /// An entitlement of `principals` (users or groups) to `resource`.
    pub fn entitlement(self, id: &str, resource: &str, principals: &[&str]) -> SiteBuilder {
        self.object(ConfigObject::Entitlement {
            id: id.into(),
            data: EntitlementData {
                resource: resource.into(),
                principals: principals.iter().map(|p| p.to_string()).collect(),
            },
        })
    }

    /// A zone with a display name.
    pub fn zone_named(self, id: &str, name: &str) -> SiteBuilder {
        self.object(ConfigObject::Zone {
            id: id.into(),
            data: ZoneData { name: name.into() },
        })
    }

    /// The deletion of an object.
    pub fn delete(mut self, kind: ObjectKind, id: &str) -> SiteBuilder {
        self.ops.push(ConfigOp::Delete(ObjectRef {
            kind,
            id: id.into(),
        }));
        self
    }

    /// The configuration as one `config.change` of `version` at `ts`.
    pub fn change(&self, ts: Ts, version: u64) -> Record {
        Record::ConfigChange(ConfigChange {
            record_id: None,
            ts,
            version,
            ops: self.ops.clone(),
        })
    }
}

/// Typed records as the observers and clients of a site send them.
pub mod records {
    use super::*;

    /// A health check of `connector`'s control plane.
    pub fn health_check(ts: Ts, connector: &str, ok: bool) -> Record {
        Record::HealthCheck(HealthCheck {
            record_id: None,
            ts,
            connector: connector.into(),
            ok,
            detail: None,
        })
    }

    /// A StoreFront heartbeat to `connector` from `storefront`.
    pub fn storefront(ts: Ts, connector: &str, storefront: &str) -> Record {
        Record::StorefrontHeartbeat(StorefrontHeartbeat {
            record_id: None,
            ts,
            connector: connector.into(),
            storefront: storefront.into(),
        })
    }

    /// A probe of `peer` by `connector`.
    pub fn peer_probe(ts: Ts, connector: &str, peer: &str, ok: bool) -> Record {
        Record::PeerProbe(PeerProbe {
            record_id: None,
            ts,
            connector: connector.into(),
            peer: peer.into(),
            ok,
        })
    }

    /// A VDA heartbeat reporting `sessions` as (session id, user, state).
    pub fn heartbeat(ts: Ts, machine: &str, sessions: &[(&str, &str, SessionState)]) -> Record {
        Record::VdaHeartbeat(VdaHeartbeat {
            record_id: None,
            ts,
            machine: machine.into(),
            sessions: sessions
                .iter()
                .map(|(id, user, state)| SessionReport {
                    id: (*id).into(),
                    user: (*user).into(),
                    state: *state,
                })
                .collect(),
        })
    }

    /// A launch of `resource` for `user` sent to `connector` from one client.
    pub fn launch(ts: Ts, request: &str, connector: &str, user: &str, resource: &str) -> Record {
        Record::LaunchRequest(Box::new(LaunchRequest {
            record_id: None,
            ts,
            request: request.into(),
            connector: connector.into(),
            user: user.into(),
            resource: resource.into(),
            client: Client {
                name: "client".into(),
                ip: "10.0.0.1".into(),
            },
            retry_of: None,
        }))
    }
}

/// A record as one log line (no newline).
pub fn line(record: &Record) -> Vec<u8> {
    encode_record(record)
}

/// A record as one log line of text (no newline).
pub fn text(record: &Record) -> String {
    String::from_utf8(encode_record(record)).expect("records encode as UTF-8")
}
