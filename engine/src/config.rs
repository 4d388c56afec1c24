//! Configuration objects carried by `config.change` records (SPEC §2.1).
//!
//! Optional fields whose default depends on another object (a group's reuse flag on the
//! site, `max_sessions` on the group kind) stay `Option` here: the engine resolves them at
//! import, when the whole configuration is known.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One operation of a `config.change`. The `op` field selects the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ConfigOp {
    /// Create or wholly replace an object.
    Upsert(ConfigObject),
    /// Remove an object.
    Delete(ObjectRef),
}

/// The kinds of configuration object.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// The site itself (id "site").
    Site,
    /// A zone (resource location).
    Zone,
    /// A Cloud Connector or Delivery Controller.
    Connector,
    /// A delivery group.
    DeliveryGroup,
    /// A VDA.
    Machine,
    /// A published application or desktop.
    Resource,
    /// A user account.
    User,
    /// A user group.
    Group,
    /// Who may launch a resource.
    Entitlement,
    /// A static machine assignment (also Remote PC enrollment).
    Assignment,
}

impl ObjectKind {
    /// Every kind, in declaration (and sort) order.
    pub const ALL: [ObjectKind; 10] = [
        ObjectKind::Site,
        ObjectKind::Zone,
        ObjectKind::Connector,
        ObjectKind::DeliveryGroup,
        ObjectKind::Machine,
        ObjectKind::Resource,
        ObjectKind::User,
        ObjectKind::Group,
        ObjectKind::Entitlement,
        ObjectKind::Assignment,
    ];

    /// The spec's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Site => "site",
            ObjectKind::Zone => "zone",
            ObjectKind::Connector => "connector",
            ObjectKind::DeliveryGroup => "delivery_group",
            ObjectKind::Machine => "machine",
            ObjectKind::Resource => "resource",
            ObjectKind::User => "user",
            ObjectKind::Group => "group",
            ObjectKind::Entitlement => "entitlement",
            ObjectKind::Assignment => "assignment",
        }
    }

    /// The kind with this spec name.
    pub fn from_name(name: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names an object for a delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectRef {
    /// Object kind.
    #[serde(deserialize_with = "crate::strict::form")]
    pub kind: ObjectKind,
    /// Exact object id.
    pub id: String,
}

/// A whole configuration object. The `kind` field selects the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ConfigObject {
    /// Site-wide settings.
    Site {
        /// Always "site".
        id: String,
        /// Settings.
        #[serde(default)]
        #[serde(deserialize_with = "crate::strict::form")]
        data: SiteData,
    },
    /// A zone.
    Zone {
        /// Zone id.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: ZoneData,
    },
    /// A connector.
    Connector {
        /// Connector FQDN.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: ConnectorData,
    },
    /// A delivery group.
    DeliveryGroup {
        /// Group id.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: DeliveryGroupData,
    },
    /// A VDA.
    Machine {
        /// Machine FQDN.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: MachineData,
    },
    /// A published resource.
    Resource {
        /// Resource id.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: ResourceData,
    },
    /// A user.
    User {
        /// User id.
        id: String,
        /// Settings.
        #[serde(default)]
        #[serde(deserialize_with = "crate::strict::form")]
        data: UserData,
    },
    /// A user group.
    Group {
        /// Group id.
        id: String,
        /// Settings (none today).
        #[serde(default)]
        #[serde(deserialize_with = "crate::strict::form")]
        data: GroupData,
    },
    /// An entitlement.
    Entitlement {
        /// Entitlement id.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: EntitlementData,
    },
    /// A static assignment.
    Assignment {
        /// Assignment id.
        id: String,
        /// Settings.
        #[serde(deserialize_with = "crate::strict::form")]
        data: AssignmentData,
    },
}

impl ConfigObject {
    /// The object's kind.
    pub fn kind(&self) -> ObjectKind {
        match self {
            ConfigObject::Site { .. } => ObjectKind::Site,
            ConfigObject::Zone { .. } => ObjectKind::Zone,
            ConfigObject::Connector { .. } => ObjectKind::Connector,
            ConfigObject::DeliveryGroup { .. } => ObjectKind::DeliveryGroup,
            ConfigObject::Machine { .. } => ObjectKind::Machine,
            ConfigObject::Resource { .. } => ObjectKind::Resource,
            ConfigObject::User { .. } => ObjectKind::User,
            ConfigObject::Group { .. } => ObjectKind::Group,
            ConfigObject::Entitlement { .. } => ObjectKind::Entitlement,
            ConfigObject::Assignment { .. } => ObjectKind::Assignment,
        }
    }

    /// The object's exact id.
    pub fn id(&self) -> &str {
        match self {
            ConfigObject::Site { id, .. }
            | ConfigObject::Zone { id, .. }
            | ConfigObject::Connector { id, .. }
            | ConfigObject::DeliveryGroup { id, .. }
            | ConfigObject::Machine { id, .. }
            | ConfigObject::Resource { id, .. }
            | ConfigObject::User { id, .. }
            | ConfigObject::Group { id, .. }
            | ConfigObject::Entitlement { id, .. }
            | ConfigObject::Assignment { id, .. } => id,
        }
    }
}

/// The rest of an object whose `kind` key was read first: its `id` and `data` (absent
/// where the derived enum defaults it: site, user, group), straight into the variant,
/// with the derived type's strict forms and without the buffering of every value serde's
/// internally tagged enums do. Any other key is refused, as the derived type refuses it.
pub(crate) fn object_after_kind<'de, A: serde::de::MapAccess<'de>>(
    kind: ObjectKind,
    map: &mut A,
) -> Result<ConfigObject, A::Error> {
    use serde::de::Error;
    use ConfigObject as O;
    fn fields<'de, A: serde::de::MapAccess<'de>, T: Deserialize<'de>>(
        map: &mut A,
        default: Option<fn() -> T>,
    ) -> Result<(String, T), A::Error> {
        let (mut id, mut data) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Id if id.is_none() => id = Some(map.next_value::<String>()?),
                Key::Data if data.is_none() => {
                    data = Some(map.next_value_seed(crate::strict::Seed::<T>::default())?)
                }
                Key::Id => return Err(A::Error::duplicate_field("id")),
                Key::Data => return Err(A::Error::duplicate_field("data")),
                Key::Kind => return Err(A::Error::duplicate_field("kind")),
                Key::Other(key) => return Err(A::Error::custom(format!("unknown field `{key}`"))),
            }
        }
        let id = id.ok_or_else(|| A::Error::missing_field("id"))?;
        match (data, default) {
            (Some(data), _) => Ok((id, data)),
            (None, Some(default)) => Ok((id, default())),
            (None, None) => Err(A::Error::missing_field("data")),
        }
    }
    macro_rules! object {
        ($variant:ident, $data:ty, $default:expr) => {{
            let (id, data) = fields::<A, $data>(map, $default)?;
            O::$variant { id, data }
        }};
    }
    Ok(match kind {
        ObjectKind::Site => object!(Site, SiteData, Some(SiteData::default)),
        ObjectKind::Zone => object!(Zone, ZoneData, None),
        ObjectKind::Connector => object!(Connector, ConnectorData, None),
        ObjectKind::DeliveryGroup => object!(DeliveryGroup, DeliveryGroupData, None),
        ObjectKind::Machine => object!(Machine, MachineData, None),
        ObjectKind::Resource => object!(Resource, ResourceData, None),
        ObjectKind::User => object!(User, UserData, Some(UserData::default)),
        ObjectKind::Group => object!(Group, GroupData, Some(GroupData::default)),
        ObjectKind::Entitlement => object!(Entitlement, EntitlementData, None),
        ObjectKind::Assignment => object!(Assignment, AssignmentData, None),
    })
}

/// A key of a configuration object, read without allocating but for an unknown one.
#[derive(Debug, PartialEq)]
enum Key {
    Kind,
    Id,
    Data,
    Other(String),
}

impl Key {
    fn name(self) -> String {
        match self {
            Key::Kind => "kind".into(),
            Key::Id => "id".into(),
            Key::Data => "data".into(),
            Key::Other(name) => name,
        }
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "kind" => Key::Kind,
                    "id" => Key::Id,
                    "data" => Key::Data,
                    other => Key::Other(other.to_string()),
                })
            }
        }
        d.deserialize_identifier(Visitor)
    }
}

/// Reads a [`ConfigObject`] as the derived type does, faster when `kind` is its first key
/// (as serde writes it: states saved in stores and checkpoints). In any other order the
/// object is read whole and handed to the derived type.
pub(crate) fn kind_first<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ConfigObject, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = ConfigObject;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a configuration object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<ConfigObject, A::Error> {
            use serde::de::Error;
            let Some(first) = map.next_key::<Key>()? else {
                return Err(A::Error::missing_field("kind"));
            };
            if first == Key::Kind {
                let kind: ObjectKind = map.next_value_seed(crate::strict::Seed::default())?;
                return object_after_kind(kind, &mut map);
            }
            // Another order: the whole object, its keys checked once each (a map would
            // keep the last of two), handed to the derived type.
            let mut whole = serde_json::Map::new();
            let mut key = Some(first.name());
            while let Some(name) = key {
                if whole.insert(name.clone(), map.next_value()?).is_some() {
                    return Err(A::Error::custom(format!("duplicate field `{name}`")));
                }
                key = map.next_key::<Key>()?.map(Key::name);
            }
            ConfigObject::deserialize(serde_json::Value::Object(whole)).map_err(A::Error::custom)
        }
    }
    d.deserialize_map(Visitor)
}

fn yes() -> bool {
    true
}

fn default_heartbeat_period_ms() -> u64 {
    600_000
}

/// Deployment profile: cloud connectors or on-premises delivery controllers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Citrix DaaS with Cloud Connectors.
    #[default]
    Daas,
    /// On-premises with Delivery Controllers and a site database.
    Onprem,
}

/// Site-wide settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SiteData {
    /// Whether LHC may engage at all (true).
    #[serde(default = "yes")]
    pub lhc_enabled: bool,
    /// Site-wide permission for pooled machines to be reused without shutdown in an outage (false).
    #[serde(default)]
    pub reuse_machines_without_shutdown_in_outage_allowed: bool,
    /// Default of the per-group reuse flag (false).
    #[serde(default)]
    pub default_reuse_machines_without_shutdown_in_outage: bool,
    /// VDA heartbeat period (600000); valid range 60000..=3600000.
    #[serde(default = "default_heartbeat_period_ms")]
    pub heartbeat_period_ms: u64,
    /// Deployment profile ("daas").
    #[serde(default, deserialize_with = "crate::strict::form")]
    pub profile: Profile,
    /// Service Continuity enabled (false): lifts the StoreFront-traffic condition of the
    /// "daas" profile (R-STATE-4).
    #[serde(default)]
    pub service_continuity_enabled: bool,
}

impl Default for SiteData {
    fn default() -> Self {
        SiteData {
            lhc_enabled: true,
            reuse_machines_without_shutdown_in_outage_allowed: false,
            default_reuse_machines_without_shutdown_in_outage: false,
            heartbeat_period_ms: default_heartbeat_period_ms(),
            profile: Profile::Daas,
            service_continuity_enabled: false,
        }
    }
}

/// Zone settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZoneData {
    /// Display name.
    pub name: String,
}

/// Connector settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectorData {
    /// Zone id the connector serves.
    pub zone: String,
}

/// Kinds of delivery group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryGroupKind {
    /// Server OS machines, many sessions each.
    MultiSession,
    /// Single-session machines assigned to one user each.
    SingleSessionStatic,
    /// Single-session machines handed out from a pool.
    SingleSessionPooled,
}

/// Delivery group settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryGroupData {
    /// Group kind.
    #[serde(deserialize_with = "crate::strict::form")]
    pub kind: DeliveryGroupKind,
    /// Whether the broker controls machine power (true).
    #[serde(default = "yes")]
    pub power_managed: bool,
    /// Shut a pooled machine down after each session (default: true for pooled groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_desktops_after_use: Option<bool>,
    /// Reuse pooled machines without shutdown in an outage (default: the site's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_machines_without_shutdown_in_outage: Option<bool>,
    /// Most sessions one user may hold in this group (no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_limit_per_user: Option<u32>,
    /// Only machines carrying this tag may serve launches (no restriction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restrict_to_tag: Option<String>,
}

/// VDA settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineData {
    /// Zone id.
    pub zone: String,
    /// Delivery group id.
    pub delivery_group: String,
    /// Session capacity (default: 1 single-session, 20 multi-session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u32>,
    /// Tags for tag-restricted groups.
    #[serde(default)]
    pub tags: Vec<String>,
    /// A Remote PC Access machine (false).
    #[serde(default)]
    pub remote_pc: bool,
    /// In maintenance mode: takes no new sessions (false).
    #[serde(default)]
    pub maintenance: bool,
}

/// Kinds of published resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A published application.
    Application,
    /// A published desktop.
    Desktop,
}

/// Published resource settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceData {
    /// Application or desktop.
    #[serde(deserialize_with = "crate::strict::form")]
    pub kind: ResourceKind,
    /// Delivery groups that deliver it.
    pub delivery_groups: Vec<String>,
    /// Zone to prefer in normal operations (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_preference: Option<String>,
}

/// User settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserData {
    /// Groups the user belongs to.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// Group settings: none today; the object exists to be referenced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupData {}

/// Entitlement settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntitlementData {
    /// Resource id.
    pub resource: String,
    /// User or group ids.
    pub principals: Vec<String>,
}

/// Static assignment settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AssignmentData {
    /// Machine FQDN.
    pub machine: String,
    /// User id.
    pub user: String,
}
