//! Objects stored as JSON text: a Description's `raw`, `chartRaw` and `chartValues` items are
//! strings, each holding one object's JSON, where the Rust types hold the objects.
//!
//! Stored as embedded objects, every write of a Description (its spec or only its status) cost
//! the API server a decode, validation and encode of every object's tree: 21-31 ms of
//! kube-apiserver CPU per write of a 50-object Description, where one string per object costs
//! 4-7 ms (`make bench-write-cost`, docs/bench/write_cost.md). The text stays readable with
//! `kubectl get desc -o yaml` (one quoted line per object) and `jq`, unlike Clusternet's base64.
//!
//! Reading accepts either form per item: the objects written before this form (embedded
//! objects) read as they are. It never fails on an item: a string that is not JSON (a hand
//! edit) reads as that string, which no applier takes for an object, so the Description is
//! reported as failed instead of a whole watch of Descriptions failing to decode.

use std::borrow::Borrow;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// One object as stored: its compact JSON text, as a JSON string.
pub fn encode(object: &Value) -> Value {
    Value::String(object.to_string())
}

/// Objects as stored (see [`encode`]), for writers that build a Description as JSON.
pub fn encode_all(objects: &[Value]) -> Value {
    Value::Array(objects.iter().map(encode).collect())
}

/// The JSON text of one stored item: the string's content, or the item itself when it is an
/// object stored in the earlier form or a string that is not JSON.
pub fn text_of(item: &RawValue) -> Box<RawValue> {
    serde_json::from_str::<String>(item.get())
        .ok()
        .and_then(|text| RawValue::from_string(text).ok())
        .unwrap_or_else(|| item.to_owned())
}

/// Serializes objects as strings of their JSON text.
pub fn serialize<S: Serializer, T: Borrow<Value>>(
    objects: &[T],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(objects.len()))?;
    for object in objects {
        seq.serialize_element(&object.borrow().to_string())?;
    }
    seq.end()
}

/// Deserializes items stored as strings of JSON text, or as objects (see the module).
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Value>, D::Error> {
    Ok(Vec::<Value>::deserialize(deserializer)?
        .into_iter()
        .map(|item| match item {
            Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            object => object,
        })
        .collect())
}

/// Deserializes items as [`deserialize`] does, into each object's JSON text.
pub fn deserialize_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Box<RawValue>>, D::Error> {
    Ok(Vec::<Box<RawValue>>::deserialize(deserializer)?
        .iter()
        .map(|item| text_of(item))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use serde_json::json;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Holder {
        #[serde(with = "super")]
        raw: Vec<Value>,
    }

    #[test]
    fn objects_are_stored_as_their_json_text_and_read_back() {
        let objects = vec![json!({"kind": "ConfigMap", "data": {"a": "1"}}), json!({})];
        let stored = serde_json::to_value(Holder {
            raw: objects.clone(),
        })
        .unwrap();
        assert_eq!(
            stored,
            json!({"raw": [r#"{"data":{"a":"1"},"kind":"ConfigMap"}"#, "{}"]})
        );
        assert_eq!(stored["raw"], encode_all(&objects));
        let read: Holder = serde_json::from_value(stored).unwrap();
        assert_eq!(read.raw, objects);
    }

    #[test]
    fn objects_stored_in_the_earlier_form_read_as_they_are() {
        let read: Holder =
            serde_json::from_value(json!({"raw": [{"kind": "ConfigMap"}, r#"{"kind":"Secret"}"#]}))
                .unwrap();
        assert_eq!(
            read.raw,
            vec![json!({"kind": "ConfigMap"}), json!({"kind": "Secret"})]
        );
        let raw: Box<RawValue> = serde_json::from_str(r#"{"kind": "ConfigMap"}"#).unwrap();
        assert_eq!(text_of(&raw).get(), r#"{"kind": "ConfigMap"}"#);
        let raw: Box<RawValue> = serde_json::from_str(r#""{\"kind\":\"Secret\"}""#).unwrap();
        assert_eq!(text_of(&raw).get(), r#"{"kind":"Secret"}"#);
    }

    #[test]
    fn a_string_that_is_not_json_reads_as_that_string_and_the_rest_still_reads() {
        // One hand-edited item must not make the whole Description, or a watch's whole list
        // page, fail to decode.
        let read: Holder =
            serde_json::from_value(json!({"raw": ["not json", r#"{"kind":"Secret"}"#]})).unwrap();
        assert_eq!(read.raw, vec![json!("not json"), json!({"kind": "Secret"})]);
        let raw: Box<RawValue> = serde_json::from_str(r#""not json""#).unwrap();
        assert_eq!(text_of(&raw).get(), r#""not json""#);
    }
}
