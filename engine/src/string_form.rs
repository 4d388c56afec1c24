//! Values written in JSON as one string and parsed from it (timestamps, record ids): their
//! serde and schema impls, written once. A string that does not parse is a decode error
//! naming what was expected, never a default value.

use std::fmt;
use std::marker::PhantomData;

use serde::{de, Deserializer};

/// Deserializes a `T` from a string with `parse`; `expecting` names the form in errors.
pub(crate) fn deserialize<'de, D, T>(
    deserializer: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_str(Visitor {
        expecting,
        parse,
        value: PhantomData,
    })
}

/// The visitor behind [`deserialize`].
struct Visitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
    value: PhantomData<T>,
}

impl<T> de::Visitor<'_> for Visitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
}

/// Implements `Serialize` (the `Display` form), `Deserialize` (through `parse`, `expecting`
/// naming the form in errors) and `JsonSchema` (`name` and the `schema` given) for a type
/// written in JSON as one string.
macro_rules! impl_string_form {
    ($ty:ident, parse: $parse:path, expecting: $expecting:literal, name: $name:literal,
     schema: $schema:tt) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        $crate::string_form::impl_string_form!($ty, serialized elsewhere, parse: $parse,
            expecting: $expecting, name: $name, schema: $schema);
    };
    // The same without `Serialize`, for a type that writes its string itself.
    ($ty:ident, serialized elsewhere, parse: $parse:path, expecting: $expecting:literal,
     name: $name:literal, schema: $schema:tt) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<$ty, D::Error> {
                $crate::string_form::deserialize(deserializer, $expecting, $parse)
            }
        }

        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}
pub(crate) use impl_string_form;
