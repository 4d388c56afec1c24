//! The changes of a what-if, parsed and checked before any record is read: engine
//! parameters, site and delivery-group settings, patch records, drop filters.
//!
//! Invariant: a `Plan` only holds changes that are valid on their own (a known parameter
//! with a value the engine accepts, a known setting of the right type, patch records that
//! decode and are in time order, filters on a known record type and field). What can only be
//! checked against the log (the group exists, a filter matches) is checked by the stream.

use std::collections::BTreeSet;

use lhc_engine::config::{DeliveryGroupData, DeliveryGroupKind, ObjectKind, SiteData};
use lhc_engine::params::Params;
use lhc_engine::record::EngineParams;
use lhc_engine::record::RECORD_TYPES;
use lhc_engine::{Record, Ts};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::WhatIfError;

/// One setting given on the command line: `KEY=VALUE`.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// The field name.
    pub key: String,
    /// The value, as JSON (`true`, `90`, `"text"`, `null` to unset an optional field).
    pub value: Value,
}

/// A record added by a patch file, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchRecord {
    /// The record (a `config.change` gets its version when it is merged).
    pub record: Record,
    /// "FILE line N", for messages.
    pub origin: String,
}

/// A `--drop` filter: a record type and fields that must all match.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    /// As given, for messages.
    pub text: String,
    /// The record type.
    pub type_name: String,
    /// (field path, pattern); a pattern ending in `*` matches a prefix.
    pub fields: Vec<(Vec<String>, String)>,
}

/// Every change of one what-if.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// `--set`: engine parameters from the start.
    pub params: Vec<Setting>,
    /// `--site`: site settings.
    pub site: Vec<Setting>,
    /// `--group`: (group id, setting).
    pub groups: Vec<(String, Setting)>,
    /// `--patch`: added records, in time order.
    pub patch: Vec<PatchRecord>,
    /// `--drop`: removed records.
    pub drops: Vec<Filter>,
    /// Config ops removed: (offset of the `config.change`, kind, id) — the ops that
    /// introduced a failed import (`--without-bad-changes`).
    pub drop_ops: BTreeSet<(u64, ObjectKind, String)>,
    /// Said in words, one line per change, in the order given.
    pub described: Vec<String>,
}

/// Splits `KEY=VALUE`; the value is JSON when it parses as JSON, else a string.
fn setting(text: &str, what: &str) -> Result<Setting, WhatIfError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(WhatIfError::bad(
            format!("{what} {text}").replace(": ", ":"),
            "expected KEY=VALUE".to_string(),
        ));
    };
    let key = key.trim().to_string();
    let value = value.trim();
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok(Setting { key, value })
}

/// Keeps `s` in `given`, said in `described` as `what KEY = VALUE`; refuses a key given
/// twice: which value should win is the user's to say.
fn keep_once(
    given: &mut Vec<Setting>,
    described: &mut Vec<String>,
    s: Setting,
    item: &str,
    what: &str,
) -> Result<(), WhatIfError> {
    if given.iter().any(|p| p.key == s.key) {
        return Err(WhatIfError::bad(
            item,
            format!("{} is set twice: give it once", s.key),
        ));
    }
    described.push(format!("{what} {} = {}", s.key, s.value));
    given.push(s);
    Ok(())
}

/// `data` with `setting` applied, through its JSON form so the type's own rules (unknown
/// field, wrong type) give the error.
pub(crate) fn with_setting<T: Serialize + DeserializeOwned>(
    data: &T,
    setting: &Setting,
) -> Result<T, String> {
    let mut value = serde_json::to_value(data).map_err(|e| e.to_string())?;
    let Value::Object(map) = &mut value else {
        return Err("not an object".into());
    };
    map.insert(setting.key.clone(), setting.value.clone());
    serde_json::from_value(value).map_err(|e| e.to_string())
}

impl Plan {
    /// Adds `--set PARAM=VALUE` (SPEC §9).
    pub fn set_param(&mut self, text: &str) -> Result<(), WhatIfError> {
        let s = setting(text, "--set")?;
        let item = format!("--set {text}");
        let params = with_setting(&EngineParams::default(), &s)
            .map_err(|e| WhatIfError::bad(&item, param_error(&e)))?;
        // Every record's own fields: the what-if's records get their time and id where
        // they are merged.
        if s.key == "ts" || s.key == "record_id" {
            return Err(WhatIfError::bad(
                &item,
                format!("`{}` is not a parameter", s.key),
            ));
        }
        if s.value.is_null() {
            return Err(WhatIfError::bad(
                &item,
                "a parameter needs a value in whole seconds".into(),
            ));
        }
        Params::default()
            .apply(&params)
            .map_err(|e| WhatIfError::bad(&item, e))?;
        keep_once(
            &mut self.params,
            &mut self.described,
            s,
            &item,
            "engine parameter",
        )
    }

    /// Adds `--site KEY=VALUE`.
    pub fn set_site(&mut self, text: &str) -> Result<(), WhatIfError> {
        let s = setting(text, "--site")?;
        let item = format!("--site {text}");
        with_setting(&SiteData::default(), &s).map_err(|e| WhatIfError::bad(&item, e))?;
        keep_once(
            &mut self.site,
            &mut self.described,
            s,
            &item,
            "site setting",
        )
    }

    /// Adds `--group GROUP:KEY=VALUE`.
    pub fn set_group(&mut self, text: &str) -> Result<(), WhatIfError> {
        let item = format!("--group {text}");
        let Some((group, rest)) = text.split_once(':') else {
            return Err(WhatIfError::bad(&item, "expected GROUP:KEY=VALUE".into()));
        };
        if group.is_empty() {
            return Err(WhatIfError::bad(&item, "the group id is empty".into()));
        }
        let s = setting(rest, &format!("--group {group}:"))?;
        if self
            .groups
            .iter()
            .any(|(g, p)| g == group && p.key == s.key)
        {
            return Err(WhatIfError::bad(
                &item,
                format!("{} of {group} is set twice: give it once", s.key),
            ));
        }
        let sample = DeliveryGroupData {
            kind: DeliveryGroupKind::SingleSessionPooled,
            power_managed: true,
            shutdown_desktops_after_use: None,
            reuse_machines_without_shutdown_in_outage: None,
            session_limit_per_user: None,
            restrict_to_tag: None,
        };
        with_setting(&sample, &s).map_err(|e| WhatIfError::bad(&item, e))?;
        self.described
            .push(format!("delivery group {group}: {} = {}", s.key, s.value));
        self.groups.push((group.to_string(), s));
        Ok(())
    }

    /// Adds `--drop FILTER`: `TYPE [FIELD=VALUE ...]`.
    pub fn drop_records(&mut self, text: &str) -> Result<(), WhatIfError> {
        let item = format!("--drop '{text}'");
        let mut words = text.split_whitespace();
        let Some(type_name) = words.next() else {
            return Err(WhatIfError::bad(
                &item,
                "empty filter: give a record type".into(),
            ));
        };
        if !RECORD_TYPES.contains(&type_name) {
            return Err(WhatIfError::bad(
                &item,
                format!(
                    "unknown record type {type_name:?}; one of: {}",
                    RECORD_TYPES.join(", ")
                ),
            ));
        }
        let known = record_fields(type_name);
        let mut fields = Vec::new();
        for word in words {
            let Some((path, pattern)) = word.split_once('=') else {
                return Err(WhatIfError::bad(
                    &item,
                    format!("{word:?}: expected FIELD=VALUE"),
                ));
            };
            let path: Vec<String> = path.split('.').map(str::to_string).collect();
            if !known.contains(&path[0]) {
                return Err(WhatIfError::bad(
                    &item,
                    format!(
                        "{type_name} has no field {:?}; its fields: {}",
                        path[0],
                        known.join(", ")
                    ),
                ));
            }
            fields.push((path, pattern.to_string()));
        }
        self.described.push(format!("records dropped: {text}"));
        self.drops.push(Filter {
            text: text.to_string(),
            type_name: type_name.to_string(),
            fields,
        });
        Ok(())
    }

    /// Adds the records of a patch file (JSONL, one record per line). With `at`, every
    /// record takes that time (its own `ts` may then be left out). A `config.change` may
    /// leave out `version`: it gets the next version where it is merged.
    pub fn add_patch(&mut self, name: &str, text: &str, at: Option<Ts>) -> Result<(), WhatIfError> {
        let mut added = Vec::new();
        let mut last: Option<(Ts, usize)> = None;
        // A byte order mark at the start (Notepad's "UTF-8 with BOM") is not JSON's, as
        // for every JSONL file lhc reads (`lhc_log::jsonl`).
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let origin = format!("{name} line {}", i + 1);
            if line.starts_with('\u{feff}') {
                return Err(WhatIfError::bad(
                    &origin,
                    lhc_engine::decode::BOM_INSIDE.into(),
                ));
            }
            let mut value: Value = serde_json::from_str(line)
                .map_err(|e| WhatIfError::bad(&origin, format!("not JSON: {e}")))?;
            let Value::Object(map) = &mut value else {
                return Err(WhatIfError::bad(&origin, "not a JSON object".into()));
            };
            if let Some(at) = at {
                map.insert("ts".into(), Value::String(at.to_string()));
            }
            if map.get("type").and_then(Value::as_str) == Some("config.change")
                && !map.contains_key("version")
            {
                map.insert("version".into(), Value::from(0));
            }
            let bytes = serde_json::to_vec(&value).expect("a JSON value serializes");
            let record = lhc_engine::decode_record(&bytes)
                .map_err(|e| WhatIfError::bad(&origin, e.to_string()))?;
            let ts = record.ts();
            if let Some((previous, line)) = last {
                if ts < previous {
                    return Err(WhatIfError::bad(
                        &origin,
                        format!(
                            "its ts {ts} is older than line {line}'s {previous}: patch records \
                             must be in time order"
                        ),
                    ));
                }
            }
            last = Some((ts, i + 1));
            added.push(PatchRecord { record, origin });
        }
        if added.is_empty() {
            return Err(WhatIfError::bad(
                name,
                "the patch file holds no record".into(),
            ));
        }
        let types: BTreeSet<&str> = added.iter().map(|p| p.record.type_name()).collect();
        self.described.push(format!(
            "{} record(s) added from {name}{} ({})",
            super::thousands(added.len() as u64),
            at.map(|t| format!(" at {t}")).unwrap_or_default(),
            types.into_iter().collect::<Vec<_>>().join(", ")
        ));
        self.patch.extend(added);
        // Stable: records of several files at one instant keep the order they were given.
        self.patch.sort_by_key(|p| p.record.ts());
        Ok(())
    }

    /// Whether nothing would change.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
            && self.site.is_empty()
            && self.groups.is_empty()
            && self.patch.is_empty()
            && self.drops.is_empty()
            && self.drop_ops.is_empty()
    }
}

/// An engine-parameter error in an admin's words.
fn param_error(serde: &str) -> String {
    if serde.contains("unknown field") {
        let known: Vec<&str> = [
            "second_check_s",
            "onprem_outage_s",
            "peer_health_window_s",
            "storefront_window_s",
            "initial_ha_s",
            "pending_recovery_s",
            "peer_timeout_s",
            "report_interval_s",
            "sync_interval_s",
            "import_duration_s",
        ]
        .to_vec();
        format!("unknown parameter; one of: {}", known.join(", "))
    } else {
        format!("{serde} (parameters are whole seconds)")
    }
}

/// The top-level fields of a record type, from the published schema.
fn record_fields(type_name: &str) -> Vec<String> {
    let schema = serde_json::to_value(schemars::schema_for!(Record)).unwrap_or_default();
    let variants = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for variant in variants {
        let Some(properties) = variant.get("properties").and_then(Value::as_object) else {
            continue;
        };
        let this = properties
            .get("type")
            .and_then(|t| t.get("const"))
            .and_then(Value::as_str);
        if this == Some(type_name) {
            return properties
                .keys()
                .filter(|k| *k != "type")
                .cloned()
                .collect();
        }
    }
    Vec::new()
}

impl Filter {
    /// Whether `record` matches (its JSON form is read only when the type does).
    pub fn matches(&self, record: &Record) -> bool {
        if record.type_name() != self.type_name {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let Ok(value) = serde_json::to_value(record) else {
            return false;
        };
        self.fields.iter().all(|(path, pattern)| {
            let mut at = &value;
            for step in path {
                match at.get(step) {
                    Some(v) => at = v,
                    None => return false,
                }
            }
            let text = match at {
                Value::String(s) => s.clone(),
                Value::Null => "null".to_string(),
                other => other.to_string(),
            };
            match pattern.strip_suffix('*') {
                Some(prefix) => text.starts_with(prefix),
                None => text == *pattern,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that a setter refused, with an error naming every one of `needles`.
    fn assert_refused(result: Result<(), WhatIfError>, needles: &[&str]) {
        let e = result.unwrap_err().to_string();
        assert!(needles.iter().all(|n| e.contains(n)), "{e}");
    }

    #[test]
    fn settings_are_checked_by_the_types_own_rules() {
        let mut plan = Plan::default();
        plan.set_param("onprem_outage_s=30").unwrap();
        let checks: [(Result<(), WhatIfError>, &[&str]); 8] = [
            (
                plan.set_param("ts=2026-01-05T09:00:00Z"),
                &["`ts` is not a parameter"],
            ),
            (
                plan.set_param("record_id=x:1.1"),
                &["`record_id` is not a parameter"],
            ),
            (
                plan.set_param("onprem_outage=30"),
                &["--set onprem_outage=30", "onprem_outage_s"],
            ),
            (plan.set_param("sync_interval_s=0"), &["at least 1 second"]),
            (plan.set_param("initial_ha_s=soon"), &["whole seconds"]),
            (plan.set_site("reuse=true"), &["unknown field `reuse`"]),
            (
                plan.set_site("lhc_enabled=maybe"),
                &["--site lhc_enabled=maybe"],
            ),
            (plan.set_group("pooled=true"), &["GROUP:KEY=VALUE"]),
        ];
        for (result, needles) in checks {
            assert_refused(result, needles);
        }
        plan.set_site("reuse_machines_without_shutdown_in_outage_allowed=true")
            .unwrap();
        plan.set_group("pooled:reuse_machines_without_shutdown_in_outage=true")
            .unwrap();
        assert_eq!(plan.described.len(), 3);
    }

    #[test]
    fn filters_name_unknown_types_and_fields_and_match_prefixes() {
        let mut plan = Plan::default();
        assert_refused(
            plan.drop_records("config.chang version=7"),
            &["unknown record type", "config.change"],
        );
        assert_refused(
            plan.drop_records("connector.lifecycle host=cc1"),
            &["no field \"host\"", "connector"],
        );
        plan.drop_records("connector.lifecycle connector=cc1* event=stop")
            .unwrap();
        let stop: Record = serde_json::from_str(
            r#"{"ts":"2026-01-05T09:00:00Z","type":"connector.lifecycle","connector":"cc1.z1","event":"stop"}"#,
        )
        .unwrap();
        let start: Record = serde_json::from_str(
            r#"{"ts":"2026-01-05T09:00:00Z","type":"connector.lifecycle","connector":"cc1.z1","event":"start"}"#,
        )
        .unwrap();
        assert!(plan.drops[0].matches(&stop));
        assert!(!plan.drops[0].matches(&start));
    }

    #[test]
    fn patches_must_decode_and_be_in_time_order() {
        let mut plan = Plan::default();
        let e = plan
            .add_patch(
                "p.jsonl",
                "{\"ts\":\"2026-01-05T09:10:00Z\",\"type\":\"clock.tick\"}\n\
                 {\"ts\":\"2026-01-05T09:00:00Z\",\"type\":\"clock.tick\"}\n",
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.jsonl line 2") && e.contains("time order"),
            "{e}"
        );
        let e = plan
            .add_patch("p.jsonl", "{\"type\":\"clock.tick\",\"tss\":1}", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.jsonl line 1"), "{e}");
        let at = Ts::parse("2026-01-05T09:30:00Z").unwrap();
        plan.add_patch(
            "p.jsonl",
            "{\"type\":\"config.change\",\"ops\":[]}",
            Some(at),
        )
        .unwrap();
        assert_eq!(plan.patch[0].record.ts(), at);
        // A patch saved with a byte order mark reads as one without.
        plan.add_patch(
            "p.jsonl",
            "\u{feff}{\"ts\":\"2026-01-05T09:40:00Z\",\"type\":\"clock.tick\"}\r\n",
            None,
        )
        .unwrap();
        assert_eq!(plan.patch.len(), 2);
        // Anywhere else one is named as what is wrong.
        let e = plan
            .add_patch(
                "p.jsonl",
                "{\"ts\":\"2026-01-05T09:50:00Z\",\"type\":\"clock.tick\"}\n\u{feff}{}",
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("byte order mark"), "{e}");
    }
}
