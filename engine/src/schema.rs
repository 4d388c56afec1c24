//! JSON Schemas generated from the record types; `schemas/` holds the committed copies.
//!
//! The committed files are the published contract (R-LOG-3). A test regenerates them and
//! fails on any difference, so the types and the files never drift apart.

use schemars::{schema_for, JsonSchema, Schema};

use crate::config::{
    AssignmentData, ConnectorData, DeliveryGroupData, EntitlementData, GroupData, MachineData,
    ResourceData, SiteData, UserData, ZoneData,
};
use crate::output::Output;
use crate::record::Record;

/// A generated schema file: its path relative to `schemas/` and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaFile {
    /// Relative path, like `config/machine.schema.json`.
    pub path: String,
    /// Pretty-printed JSON with a trailing newline.
    pub text: String,
}

fn file<T: JsonSchema>(path: &str) -> SchemaFile {
    let schema: Schema = schema_for!(T);
    let mut text = serde_json::to_string_pretty(&schema).expect("schemas serialize");
    text.push('\n');
    SchemaFile {
        path: path.to_string(),
        text,
    }
}

/// Every schema file, in a fixed order.
pub fn generate() -> Vec<SchemaFile> {
    vec![
        file::<Record>("input.schema.json"),
        file::<Output>("output.schema.json"),
        file::<SiteData>("config/site.schema.json"),
        file::<ZoneData>("config/zone.schema.json"),
        file::<ConnectorData>("config/connector.schema.json"),
        file::<DeliveryGroupData>("config/delivery_group.schema.json"),
        file::<MachineData>("config/machine.schema.json"),
        file::<ResourceData>("config/resource.schema.json"),
        file::<UserData>("config/user.schema.json"),
        file::<GroupData>("config/group.schema.json"),
        file::<EntitlementData>("config/entitlement.schema.json"),
        file::<AssignmentData>("config/assignment.schema.json"),
    ]
}
