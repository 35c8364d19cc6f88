//! The config file's serde reader: keys of the schema only, values of their kind's shape.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Unexpected, Visitor};

use super::{Kind, Layer, Schema, Setting, Value};

/// Deserializes a whole config file into a [`Layer`], refusing keys the schema lacks.
pub(super) struct FileSeed<'a>(pub(super) &'a Schema);

impl<'de> DeserializeSeed<'de> for FileSeed<'_> {
    type Value = Layer;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Layer, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FileSeed<'_> {
    type Value = Layer;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table of {} settings", self.0.program)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Layer, A::Error> {
        let mut layer = Layer::default();
        while let Some(setting) = map.next_key_seed(KeySeed(self.0))? {
            let value = map.next_value_seed(ValueSeed(setting.kind))?;
            layer.0.insert(setting.name, value);
        }
        Ok(layer)
    }
}

/// A key of the file: a setting of the schema, else serde's "unknown field" (which
/// [`crate::config_file`] turns into the dotted-key hint when it applies).
struct KeySeed<'a>(&'a Schema);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = &'static Setting;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = &'static Setting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a setting name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.0
            .setting(v)
            .ok_or_else(|| E::unknown_field(v, self.0.names))
    }
}

/// A value of the file, of the shape its setting's kind wants.
struct ValueSeed(Kind);

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for ValueSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.expected())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        match self.0 {
            Kind::Duration(_) | Kind::Int { .. } => Ok(Value::Int(v.into())),
            _ => Err(E::invalid_type(Unexpected::Signed(v), &self)),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        match self.0 {
            Kind::Duration(_) | Kind::Int { .. } => Ok(Value::Int(v.into())),
            _ => Err(E::invalid_type(Unexpected::Unsigned(v), &self)),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        match self.0 {
            Kind::Bool => Ok(Value::Bool(v)),
            _ => Err(E::invalid_type(Unexpected::Bool(v), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        match self.0 {
            Kind::Duration(_) | Kind::Int { .. } | Kind::Bool => {
                Err(E::invalid_type(Unexpected::Str(v), &self))
            }
            _ => Ok(Value::Text(v.to_string())),
        }
    }
}
