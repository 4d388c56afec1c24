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
    let mut schema: Schema = schema_for!(T);
    close_upsert_ops(&mut schema);
    let mut text = serde_json::to_string_pretty(&schema).expect("schemas serialize");
    text.push('\n');
    SchemaFile {
        path: path.to_string(),
        text,
    }
}

/// An upsert op is tagged twice (`op`, then `kind`), and schemars describes the `kind`
/// variants without the outer `op` property, so it cannot close them: the published schema
/// then allowed keys that lhc rejects. Each variant gets the `op` property and
/// `additionalProperties: false`, so the schema and the decoder agree in both directions.
fn close_upsert_ops(schema: &mut Schema) {
    let Some(variants) = schema
        .pointer_mut("/$defs/ConfigOp/oneOf")
        .and_then(|v| v.as_array_mut())
    else {
        return;
    };
    for variant in variants {
        let Some(op) = variant.pointer("/properties/op").cloned() else {
            continue;
        };
        let Some(kinds) = variant.get_mut("oneOf").and_then(|v| v.as_array_mut()) else {
            continue;
        };
        for kind in kinds {
            if let Some(properties) = kind.get_mut("properties").and_then(|p| p.as_object_mut()) {
                properties.insert("op".to_string(), op.clone());
            }
            if let Some(object) = kind.as_object_mut() {
                object.insert("additionalProperties".to_string(), false.into());
            }
        }
    }
}

/// The schema file of configuration object type `T`, named after its kind
/// (`DeliveryGroupData` → `config/delivery_group.schema.json`).
fn config_file<T: JsonSchema>() -> SchemaFile {
    let name = T::schema_name();
    let kind = name
        .strip_suffix("Data")
        .expect("configuration types end in Data");
    let mut snake = String::new();
    for (i, c) in kind.char_indices() {
        if i > 0 && c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    file::<T>(&format!("config/{snake}.schema.json"))
}

/// The schema files of configuration object types, in the order given.
macro_rules! config_files {
    ($($data:ty),* $(,)?) => {
        [$(config_file::<$data>()),*]
    };
}

/// Every schema file, in a fixed order: the input and output records, then each kind of
/// configuration object.
pub fn generate() -> Vec<SchemaFile> {
    let mut files = vec![
        file::<Record>("input.schema.json"),
        file::<Output>("output.schema.json"),
        file::<crate::output::PublishedOutput>("published-output.schema.json"),
    ];
    files.extend(config_files![
        SiteData,
        ZoneData,
        ConnectorData,
        DeliveryGroupData,
        MachineData,
        ResourceData,
        UserData,
        GroupData,
        EntitlementData,
        AssignmentData,
    ]);
    files
}
