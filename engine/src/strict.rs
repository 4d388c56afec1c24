//! Input fields read only in the form the published schemas give them.
//!
//! serde's derived types take more than one JSON form: a struct also from an array of its
//! fields in order (`"client":["pc","10.0.0.1"]`), a unit enum also from a one-key object
//! (`"event":{"logon":null}`). The schemas in `schemas/` refuse both, and an input record
//! must mean one thing to every reader of the log (another implementation, a schema
//! validator, an admin's `jq`), so the record and configuration types read their nested
//! objects and enum names through these helpers (`#[serde(deserialize_with = "crate::strict::form")]`).
//! Invariant: what they accept decodes to the value the derived impl gives; they only
//! refuse the other forms, with serde's "invalid type" message (located by the decoder's
//! error walk like any other). The node's HTTP API reads its request bodies through them
//! too, so that what it takes is what its OpenAPI description says.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, Visitor};
use serde::Deserialize;

/// A struct-typed field from a JSON object only; a unit-enum-typed one from a JSON string
/// (its name) only. For those two only: an `Option` or a newtype around them would be read
/// by the inner deserializer's `deserialize_any` (use `form` on what they wrap instead).
pub fn form<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(Strict(deserializer))
}

/// A list of structs, each from a JSON object, without spare capacity: a heartbeat's
/// session list is kept for its machine until the next one, and serde's growth by doubling
/// left up to half of 40,000 lists unused. Trimmed here, on the thread that decodes.
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Items<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of objects")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(item) = seq.next_element_seed(Seed::<T>::default())? {
                list.push(item);
            }
            list.shrink_to_fit();
            Ok(list)
        }
    }
    deserializer.deserialize_seq(Items(PhantomData))
}

/// [`form`] as a seed, for hand-written visitors (the decoder's fast path).
pub struct Seed<T>(PhantomData<T>);

impl<T> Default for Seed<T> {
    fn default() -> Self {
        Seed(PhantomData)
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Seed<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        form(deserializer)
    }
}

/// A deserializer that hands a struct only a map and an enum only a string; anything else
/// goes to the inner deserializer as it is. (It wraps one value: the struct's own fields
/// are read by the inner deserializer, so each nested field says how it is read.)
struct Strict<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, MapOnly(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_str(NameOnly(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map identifier
        ignored_any
    }
}

/// A struct's visitor that refuses the array form.
struct MapOnly<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for MapOnly<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }
}

/// A unit enum's visitor that takes its variant from a string only.
struct NameOnly<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for NameOnly<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<V::Value, E> {
        self.0.visit_enum(name.into_deserializer())
    }
}
