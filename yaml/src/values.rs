//! Building a `serde_json::Value` from YAML as its own `Deserialize` does, counting down the
//! values it may still create, so that an expanding alias fails as soon as the budget is spent.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::{Error, MAX_EXPANDED_BYTES, MAX_VALUES, VALUE_BYTES};

/// The values, and the bytes, a text may still expand to.
pub(crate) struct Budget {
    values: Cell<usize>,
    bytes: Cell<usize>,
}

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget {
            values: Cell::new(MAX_VALUES),
            bytes: Cell::new(MAX_EXPANDED_BYTES),
        }
    }
}

/// Reads one document from `document` into a value, within `budget`.
pub(crate) fn bounded<'de, D>(document: D, budget: &Budget) -> Result<Value, Error>
where
    D: Deserializer<'de, Error = serde_yaml::Error>,
{
    Ok(Bounded(budget).deserialize(document)?)
}

struct Bounded<'a>(&'a Budget);

impl Bounded<'_> {
    /// Spends one value holding `text` bytes of text (a string, or a map key).
    fn take_text<E: de::Error>(&self, text: usize) -> Result<(), E> {
        let budget = self.0;
        let values = budget.values.get().checked_sub(1).ok_or_else(|| {
            E::custom(format!(
                "the document expands to more than {MAX_VALUES} values (YAML aliases \
                 repeating large anchors?)"
            ))
        })?;
        let bytes = budget
            .bytes
            .get()
            .checked_sub(VALUE_BYTES.saturating_add(text))
            .ok_or_else(|| {
                E::custom(format!(
                    "the document expands to more than {MAX_EXPANDED_BYTES} bytes (YAML \
                     aliases repeating large anchors?)"
                ))
            })?;
        budget.values.set(values);
        budget.bytes.set(bytes);
        Ok(())
    }

    fn take<E: de::Error>(&self) -> Result<(), E> {
        self.take_text(0)
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.take()?;
        Number::from_i128(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.take()?;
        Number::from_u128(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.take()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.take_text(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.take_text(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Bounded(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.take_text(key.len())?;
            let value = map.next_value_seed(Bounded(self.0))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}
