//! Decoding records from JSON, with errors that name the field and the offset (R-LOG-3).
//!
//! The fast path is one typed `serde_json` decode. Only when it fails does the slow path
//! walk the record again, level by level, to find the JSON path at fault: serde's tagged
//! enums buffer their content and lose the path, so the walk dispatches on `type`, `op`
//! and `kind` itself and decodes each level with path tracking.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::{
    AssignmentData, ConnectorData, DeliveryGroupData, EntitlementData, GroupData, MachineData,
    ObjectKind, ObjectRef, ResourceData, SiteData, UserData, ZoneData,
};
use crate::record::*;
use crate::ts::{Ts, TIMESTAMP_ERROR_PREFIX};

/// Classes of decode failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// Not JSON at all.
    Syntax,
    /// JSON, but not an object.
    NotAnObject,
    /// `type` names no record type.
    UnknownType,
    /// A field the record type does not have.
    UnknownField,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong JSON type.
    WrongType,
    /// `ts` (or another time) is not RFC 3339 UTC with at most millisecond precision.
    BadTimestamp,
    /// A field has the right type but a value outside its domain (unknown enum value...).
    BadValue,
}

impl DecodeErrorKind {
    /// Short stable name, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeErrorKind::Syntax => "syntax",
            DecodeErrorKind::NotAnObject => "not_an_object",
            DecodeErrorKind::UnknownType => "unknown_type",
            DecodeErrorKind::UnknownField => "unknown_field",
            DecodeErrorKind::MissingField => "missing_field",
            DecodeErrorKind::WrongType => "wrong_type",
            DecodeErrorKind::BadTimestamp => "bad_timestamp",
            DecodeErrorKind::BadValue => "bad_value",
        }
    }
}

/// A record that could not be decoded: what is wrong, where in the JSON, and at which offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Log offset (or 0-based line index for a file) of the record, when known.
    pub offset: Option<u64>,
    /// JSON path of the field at fault (`ops[0].data.zone`); empty for the whole record.
    pub path: String,
    /// Class of failure.
    pub kind: DecodeErrorKind,
    /// The decoder's explanation.
    pub detail: String,
}

impl DecodeError {
    fn new(path: impl Into<String>, kind: DecodeErrorKind, detail: impl Into<String>) -> Self {
        DecodeError {
            offset: None,
            path: path.into(),
            kind,
            detail: detail.into(),
        }
    }

    /// The same error, located at `offset`.
    pub fn at(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// The message without the offset, as a quarantine output carries it.
    pub fn without_offset(&self) -> String {
        let path = if self.path.is_empty() {
            "(record)"
        } else {
            &self.path
        };
        format!(
            "field `{path}`: {}: {}",
            self.kind.as_str().replace('_', " "),
            self.detail
        )
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(offset) = self.offset {
            write!(f, "record at offset {offset}: ")?;
        }
        f.write_str(&self.without_offset())
    }
}

impl std::error::Error for DecodeError {}

/// Decodes one record from its JSON bytes.
pub fn decode_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    let record = decode_fields(bytes)?;
    unique_sessions(&record)?;
    Ok(record)
}

/// The contract's rule no schema keyword states: a heartbeat lists each session id once
/// ("unique on its machine"). A session listed twice would count twice as load and
/// toward limits, and refuse launches a machine has room for (found by hostile testing).
pub fn unique_sessions(record: &Record) -> Result<(), DecodeError> {
    match record {
        Record::VdaHeartbeat(h) => unique_session_ids(&h.sessions),
        _ => Ok(()),
    }
}

/// [`unique_sessions`] of a heartbeat's list: the first id listed a second time, named at
/// its second place. Linear: a record may hold a million sessions.
pub fn unique_session_ids(sessions: &[crate::record::SessionReport]) -> Result<(), DecodeError> {
    let twice = |j: usize, i: usize| {
        DecodeError::new(
            format!("sessions[{j}].id"),
            DecodeErrorKind::BadValue,
            format!(
                "session id {:?} is listed twice (also at sessions[{i}]): a session id is \
                 unique on its machine",
                sessions[j].id
            ),
        )
    };
    // Heartbeats usually list a few sessions: comparing with those before costs less than
    // a set, which takes over beyond a handful (a quadratic scan of a large list stalled
    // imports for seconds; found in review).
    if sessions.len() <= 16 {
        for (j, s) in sessions.iter().enumerate().skip(1) {
            if let Some(i) = sessions[..j].iter().position(|t| t.id == s.id) {
                return Err(twice(j, i));
            }
        }
        return Ok(());
    }
    let mut seen = std::collections::HashMap::with_capacity(sessions.len());
    for (j, s) in sessions.iter().enumerate() {
        if let Some(&i) = seen.get(s.id.as_str()) {
            return Err(twice(j, i));
        }
        seen.insert(s.id.as_str(), j);
    }
    Ok(())
}

/// [`decode_record`] without the rules across fields.
fn decode_fields(bytes: &[u8]) -> Result<Record, DecodeError> {
    if let Some(record) = decode_tag_first(bytes) {
        return Ok(record);
    }
    match serde_json::from_slice::<Record>(bytes) {
        // serde's derived enums also take a variant's index for its name (`"op":0`,
        // `"kind":1`, `"type":2`), which the published schema refuses: the walk that
        // locates errors requires string tags, so the general way is checked by it too.
        Ok(record) => match explain(bytes) {
            Some(error) => Err(error),
            None => Ok(record),
        },
        Err(fast) => Err(explain(bytes)
            .unwrap_or_else(|| DecodeError::new("", DecodeErrorKind::BadValue, fast.to_string()))),
    }
}

/// The fast path for records whose first key is `type` (as `lhc` writes them), or `ts` then
/// `type` (as people write them): the tag is read directly and the rest decoded straight
/// into its variant, instead of buffering the whole object as serde's internally tagged
/// enums do (about twice the work). Anything it cannot take — another key order,
/// whitespace, an error — returns `None` and goes the general way, which also produces the
/// located error; a record it accepts decodes to the same value the general way would.
fn decode_tag_first(bytes: &[u8]) -> Option<Record> {
    use crate::record::*;
    // A plain string's end: its closing quote, or None at an escape.
    fn string_end(s: &[u8]) -> Option<usize> {
        let end = s.iter().position(|&b| b == b'"' || b == b'\\')?;
        (s[end] == b'"').then_some(end)
    }
    // `{"ts":"...","type":"...",` (hand-written logs, the spec's examples) is taken too: the
    // body keeps the `ts` pair in front of the remaining fields.
    let (ts_pair, rest) = match bytes.strip_prefix(b"{\"ts\":\"") {
        Some(after_key) => {
            let end = string_end(after_key)?;
            let rest = after_key[end + 1..].strip_prefix(b",\"type\":\"")?;
            (&bytes[1..7 + end + 1], rest)
        }
        None => (&b""[..], bytes.strip_prefix(b"{\"type\":\"")?),
    };
    let end = string_end(rest)?;
    let after = &rest[end + 1..];
    let body: std::borrow::Cow<[u8]> = match after.first()? {
        b',' => {
            let mut object = Vec::with_capacity(ts_pair.len() + after.len() + 1);
            object.push(b'{');
            if !ts_pair.is_empty() {
                object.extend_from_slice(ts_pair);
                object.push(b',');
            }
            object.extend_from_slice(&after[1..]);
            std::borrow::Cow::Owned(object)
        }
        _ => return None,
    };
    fn de<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
        serde_json::from_slice(body).ok()
    }
    Some(match &rest[..end] {
        b"vda.heartbeat" => Record::VdaHeartbeat(de::<VdaHeartbeat>(&body)?),
        b"session.event" => Record::SessionEvent(de::<SessionEvent>(&body)?),
        b"launch.request" => Record::LaunchRequest(Box::new(de::<LaunchRequest>(&body)?)),
        b"health.check" => Record::HealthCheck(de::<HealthCheck>(&body)?),
        b"peer.probe" => Record::PeerProbe(de::<PeerProbe>(&body)?),
        b"storefront.heartbeat" => Record::StorefrontHeartbeat(de::<StorefrontHeartbeat>(&body)?),
        b"clock.tick" => Record::ClockTick(de::<ClockTick>(&body)?),
        b"config.change" => Record::ConfigChange(de::<OrderedChange>(&body)?.into()),
        // The rare kinds take the general path.
        _ => return None,
    })
}

/// A `config.change` whose ops name `op` then `kind` first (as lhc and the simulator write
/// them): each op decodes straight into its variant. serde's derived path for the two nested
/// internally tagged enums buffers every op twice, which made decoding a whole site's
/// configuration cost twice the JSON. Whatever this path refuses (another key order, an
/// escape in a key, any error), the general path decodes or explains; what it accepts is
/// the value the general path gives (a property test holds the two side by side).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrderedChange {
    ts: Ts,
    version: u64,
    ops: Vec<OrderedOp>,
    #[serde(default)]
    record_id: Option<crate::record_id::RecordId>,
}

impl From<OrderedChange> for ConfigChange {
    fn from(c: OrderedChange) -> ConfigChange {
        ConfigChange {
            record_id: c.record_id,
            ts: c.ts,
            version: c.version,
            ops: c.ops.into_iter().map(|o| o.0).collect(),
        }
    }
}

/// One op of an [`OrderedChange`].
struct OrderedOp(crate::config::ConfigOp);

impl<'de> Deserialize<'de> for OrderedOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(OrderedOpVisitor)
    }
}

struct OrderedOpVisitor;

impl<'de> serde::de::Visitor<'de> for OrderedOpVisitor {
    type Value = OrderedOp;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an op object whose first keys are `op` and `kind`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OrderedOp, A::Error> {
        use crate::config::ConfigOp;
        use serde::de::Error;
        if map.next_key::<&str>()? != Some("op") {
            return Err(A::Error::custom("`op` is not the first key"));
        }
        let upsert = match map.next_value::<&str>()? {
            "upsert" => true,
            "delete" => false,
            _ => return Err(A::Error::custom("unknown op")),
        };
        if map.next_key::<&str>()? != Some("kind") {
            return Err(A::Error::custom("`kind` is not the second key"));
        }
        // Strict forms, as the derived types read them (see `strict`).
        let kind: ObjectKind = map.next_value_seed(crate::strict::Seed::default())?;
        if !upsert {
            let mut id = None;
            while let Some(key) = map.next_key::<&str>()? {
                match key {
                    "id" if id.is_none() => id = Some(map.next_value::<String>()?),
                    _ => return Err(A::Error::custom("unexpected key")),
                }
            }
            let id = id.ok_or_else(|| A::Error::custom("no id"))?;
            return Ok(OrderedOp(ConfigOp::Delete(ObjectRef { kind, id })));
        }
        let object = crate::config::object_after_kind(kind, &mut map)?;
        Ok(OrderedOp(ConfigOp::Upsert(object)))
    }
}

/// Decodes one record and locates any error at `offset`.
pub fn decode_record_at(bytes: &[u8], offset: u64) -> Result<Record, DecodeError> {
    decode_record(bytes).map_err(|e| e.at(offset))
}

/// The canonical JSON form of a record (no trailing newline).
pub fn encode_record(record: &Record) -> Vec<u8> {
    serde_json::to_vec(record).expect("records always serialize")
}

/// The UTF-8 byte order mark (a JSONL reader skips one at the start of a file).
pub const BYTE_ORDER_MARK: &[u8] = b"\xef\xbb\xbf";

/// Why a record that begins with a byte order mark is refused.
pub const BOM_INSIDE: &str = "the record starts with a UTF-8 byte order mark (EF BB BF), which is \
     skipped only at the very start of a file: remove it (files joined together keep the \
     marks their parts began with)";

/// Walks a record that failed the fast path and returns the first error with its path.
fn explain(bytes: &[u8]) -> Option<DecodeError> {
    if bytes.starts_with(BYTE_ORDER_MARK) {
        // serde would say "expected value at line 1 column 1" of a line that looks fine.
        return Some(DecodeError::new("", DecodeErrorKind::Syntax, BOM_INSIDE));
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Some(DecodeError::new("", DecodeErrorKind::Syntax, e.to_string())),
    };
    let Value::Object(mut map) = value else {
        return Some(DecodeError::new(
            "",
            DecodeErrorKind::NotAnObject,
            format!(
                "a record must be a JSON object, found {}",
                json_type(&value)
            ),
        ));
    };
    let ty = match take_tag(&mut map, "", "type", &RECORD_TYPES) {
        Ok(t) => t,
        Err(e) => return Some(e),
    };
    let rest = Value::Object(map);
    let result = match ty.as_str() {
        "engine.params" => check::<EngineParams>(rest, ""),
        "config.change" => explain_config_change(rest),
        "health.check" => check::<HealthCheck>(rest, ""),
        "peer.probe" => check::<PeerProbe>(rest, ""),
        "storefront.heartbeat" => check::<StorefrontHeartbeat>(rest, ""),
        "service.status" => check::<ServiceStatus>(rest, ""),
        "connector.lifecycle" => check::<ConnectorLifecycle>(rest, ""),
        "storage.fault" => check::<StorageFault>(rest, ""),
        "vda.heartbeat" => check::<VdaHeartbeat>(rest, ""),
        "session.event" => check::<SessionEvent>(rest, ""),
        "launch.request" => check::<LaunchRequest>(rest, ""),
        "admin.command" => check::<AdminCommand>(rest, ""),
        "clock.tick" => check::<ClockTick>(rest, ""),
        _ => unreachable!("take_tag only returns known types"),
    };
    result.err()
}

/// `config.change` without its ops, so ops can be walked one by one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // decoded only to find errors
struct ConfigChangeHead {
    ts: Ts,
    version: u64,
    #[serde(default)]
    record_id: Option<crate::record_id::RecordId>,
}

fn explain_config_change(value: Value) -> Result<(), DecodeError> {
    let Value::Object(mut map) = value else {
        unreachable!("caller passes an object")
    };
    let ops = map.remove("ops");
    check::<ConfigChangeHead>(Value::Object(map), "")?;
    let items = match ops {
        None => return Err(missing("", "ops")),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(DecodeError::new(
                "ops",
                DecodeErrorKind::WrongType,
                format!(
                    "expected an array of operations, found {}",
                    json_type(&other)
                ),
            ))
        }
    };
    for (index, item) in items.into_iter().enumerate() {
        explain_op(item, &format!("ops[{index}]"))?;
    }
    Ok(())
}

/// An upsert whose `data` must be present.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
#[serde(bound(deserialize = "D: Deserialize<'de>"))]
struct Upsert<D> {
    id: String,
    #[serde(deserialize_with = "crate::strict::form")]
    data: D,
}

/// An upsert whose `data` may be omitted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
#[serde(bound(deserialize = "D: Deserialize<'de> + Default"))]
struct UpsertDefaulted<D: Default> {
    id: String,
    #[serde(default, deserialize_with = "crate::strict::form")]
    data: D,
}

fn explain_op(value: Value, path: &str) -> Result<(), DecodeError> {
    let Value::Object(mut map) = value else {
        return Err(DecodeError::new(
            path,
            DecodeErrorKind::WrongType,
            format!("expected an operation object, found {}", json_type(&value)),
        ));
    };
    let op = take_tag(&mut map, path, "op", &["upsert", "delete"])?;
    if op == "delete" {
        return check::<ObjectRef>(Value::Object(map), path);
    }
    let kinds: Vec<&str> = ObjectKind::ALL.iter().map(|k| k.as_str()).collect();
    let kind = take_tag(&mut map, path, "kind", &kinds)?;
    let rest = Value::Object(map);
    match ObjectKind::from_name(&kind).expect("take_tag only returns known kinds") {
        ObjectKind::Site => check::<UpsertDefaulted<SiteData>>(rest, path),
        ObjectKind::Zone => check::<Upsert<ZoneData>>(rest, path),
        ObjectKind::Connector => check::<Upsert<ConnectorData>>(rest, path),
        ObjectKind::DeliveryGroup => check::<Upsert<DeliveryGroupData>>(rest, path),
        ObjectKind::Machine => check::<Upsert<MachineData>>(rest, path),
        ObjectKind::Resource => check::<Upsert<ResourceData>>(rest, path),
        ObjectKind::User => check::<UpsertDefaulted<UserData>>(rest, path),
        ObjectKind::Group => check::<UpsertDefaulted<GroupData>>(rest, path),
        ObjectKind::Entitlement => check::<Upsert<EntitlementData>>(rest, path),
        ObjectKind::Assignment => check::<Upsert<AssignmentData>>(rest, path),
    }
}

/// Removes and returns a tag field (`type`, `op`, `kind`) that must be one of `known`.
fn take_tag(
    map: &mut Map<String, Value>,
    prefix: &str,
    field: &str,
    known: &[&str],
) -> Result<String, DecodeError> {
    let path = join(prefix, field);
    match map.remove(field) {
        None => Err(missing(prefix, field)),
        Some(Value::String(s)) if known.contains(&s.as_str()) => Ok(s),
        Some(Value::String(s)) => Err(DecodeError::new(
            path,
            if field == "type" {
                DecodeErrorKind::UnknownType
            } else {
                DecodeErrorKind::BadValue
            },
            format!(
                "unknown {field} {s:?}, expected one of: {}",
                known.join(", ")
            ),
        )),
        Some(other) => Err(DecodeError::new(
            path,
            DecodeErrorKind::WrongType,
            format!("expected a string, found {}", json_type(&other)),
        )),
    }
}

/// Decodes `value` as `T` with path tracking; errors are located under `prefix`.
fn check<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<(), DecodeError> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(_) => Ok(()),
        Err(e) => {
            let inner = e.path().to_string();
            let inner = if inner == "." { String::new() } else { inner };
            Err(classify(&join(prefix, &inner), e.into_inner().to_string()))
        }
    }
}

/// Turns serde's message into a typed error; `path` is where serde stopped.
fn classify(path: &str, message: String) -> DecodeError {
    let named = |prefix: &str| -> Option<String> {
        let rest = message.strip_prefix(prefix)?;
        let name = rest.strip_prefix('`')?;
        Some(name[..name.find('`')?].to_string())
    };
    if let Some(field) = named("missing field ") {
        return DecodeError::new(join(path, &field), DecodeErrorKind::MissingField, message);
    }
    if let Some(field) = named("unknown field ") {
        // serde reports an unknown key before entering it, so the path ends at its parent.
        let full = if path.rsplit('.').next() == Some(field.as_str()) {
            path.to_string()
        } else {
            join(path, &field)
        };
        return DecodeError::new(full, DecodeErrorKind::UnknownField, message);
    }
    // An integer too large for any integer type reaches serde as a float: say what it
    // likely is (a counter or a period beyond the field's range), not only "float".
    let message =
        match ["u64", "u32"]
            .iter()
            .find(|t| message.starts_with("invalid type: floating point") && message.ends_with(*t))
        {
            Some(&t) => {
                format!(
            "{message} (a number written as an integer reads so when it is too large: this \
             field holds at most {})",
            if t == "u64" { u64::MAX.to_string() } else { u32::MAX.to_string() }
        )
            }
            None => message,
        };
    let kind = if message.contains(TIMESTAMP_ERROR_PREFIX) {
        DecodeErrorKind::BadTimestamp
    } else if message.starts_with("invalid type") {
        DecodeErrorKind::WrongType
    } else {
        DecodeErrorKind::BadValue
    };
    DecodeError::new(path, kind, message)
}

fn missing(prefix: &str, field: &str) -> DecodeError {
    DecodeError::new(
        join(prefix, field),
        DecodeErrorKind::MissingField,
        format!("missing field `{field}`"),
    )
}

fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, _) => field.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}.{field}"),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
