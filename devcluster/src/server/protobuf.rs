//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
//!
//! kubectl 1.32 sends built-in objects as protobuf from its typed clients (`kubectl create
//! namespace|configmap|secret|deployment|...`, `run`, `expose`, `create token`). The body is
//! the `k8s\0` magic followed by a `runtime.Unknown` envelope whose `raw` holds the object's
//! message. Field tables come from `proto_schema.txt` (derived from the `generated.proto`
//! files of k8s.io/api and k8s.io/apimachinery v0.32.13), and the decoded object is rendered
//! as the JSON the same object would have been sent as (zero values of optional scalars are
//! omitted, like Go's `omitempty`).

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value, json};

const SCHEMA: &str = include_str!("proto_schema.txt");

struct Field {
    name: &'static str,
    label: u8,
    ty: &'static str,
}

type Messages = HashMap<&'static str, HashMap<u64, Field>>;

fn schema() -> &'static Messages {
    static S: OnceLock<Messages> = OnceLock::new();
    S.get_or_init(|| {
        let mut out = HashMap::new();
        for line in SCHEMA.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let Some((name, fields)) = line.split_once('|') else {
                continue;
            };
            let mut fs = HashMap::new();
            for f in fields.split(';').filter(|f| !f.is_empty()) {
                let parts: Vec<&'static str> = f.split(' ').collect();
                if let [num, fname, label, ty] = parts.as_slice()
                    && let Ok(n) = num.parse::<u64>()
                {
                    fs.insert(
                        n,
                        Field {
                            name: fname,
                            label: label.as_bytes().first().copied().unwrap_or(b'o'),
                            ty,
                        },
                    );
                }
            }
            out.insert(name, fs);
        }
        out
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        let s = self.buf.get(self.pos..end).ok_or("truncated field")?;
        self.pos = end;
        Ok(s)
    }

    fn field(&mut self) -> Result<(u64, Wire<'a>), String> {
        let key = self.varint()?;
        let num = key >> 3;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Wire::Fixed64(u64::from_le_bytes(a))
            }
            2 => {
                let n = self.varint()? as usize;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                Wire::Fixed32(u32::from_le_bytes(a))
            }
            w => return Err(format!("unsupported wire type {w}")),
        };
        Ok((num, wire))
    }
}

fn scalar(ty: &str, w: &Wire<'_>) -> Result<Value, String> {
    Ok(match (ty, w) {
        ("string", Wire::Bytes(b)) => Value::String(String::from_utf8_lossy(b).into_owned()),
        ("bytes", Wire::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        ("bool", Wire::Varint(v)) => Value::Bool(*v != 0),
        ("int32", Wire::Varint(v)) => json!(*v as i64 as i32),
        ("int64", Wire::Varint(v)) => json!(*v as i64),
        ("uint32" | "uint64", Wire::Varint(v)) => json!(*v),
        ("double", Wire::Fixed64(v)) => json!(f64::from_bits(*v)),
        ("float", Wire::Fixed32(v)) => json!(f32::from_bits(*v)),
        _ => return Err(format!("wire type does not match {ty}")),
    })
}

fn is_scalar(ty: &str) -> bool {
    matches!(
        ty,
        "string" | "bytes" | "bool" | "int32" | "int64" | "uint32" | "uint64" | "double" | "float"
    )
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn time_string(seconds: i64, nanos: i64, micro: bool) -> Value {
    if seconds == 0 && nanos == 0 {
        return Value::Null;
    }
    let Some(t) = chrono::DateTime::from_timestamp(seconds, nanos.max(0) as u32) else {
        return Value::Null;
    };
    let fmt = if micro {
        chrono::SecondsFormat::Micros
    } else {
        chrono::SecondsFormat::Secs
    };
    Value::String(t.to_rfc3339_opts(fmt, true))
}

fn special(name: &str, buf: &[u8]) -> Result<Option<Value>, String> {
    let short = name.rsplit('.').next().unwrap_or("");
    let known = matches!(
        (name, short),
        (_, "Time" | "MicroTime" | "Duration" | "FieldsV1")
            if name.starts_with("k8s.io.apimachinery.pkg.apis.meta.v1.")
    ) || name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
        || name == "k8s.io.apimachinery.pkg.api.resource.Quantity"
        || name == "k8s.io.apimachinery.pkg.runtime.RawExtension";
    if !known {
        return Ok(None);
    }
    let mut r = Reader::new(buf);
    let mut ints: HashMap<u64, i64> = HashMap::new();
    let mut bytes: HashMap<u64, &[u8]> = HashMap::new();
    while !r.done() {
        match r.field()? {
            (n, Wire::Varint(v)) => {
                ints.insert(n, v as i64);
            }
            (n, Wire::Bytes(b)) => {
                bytes.insert(n, b);
            }
            _ => {}
        }
    }
    let int = |n| ints.get(&n).copied().unwrap_or(0);
    let text = |n| {
        bytes
            .get(&n)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    Ok(Some(match short {
        "Time" => time_string(int(1), int(2), false),
        "MicroTime" => time_string(int(1), int(2), true),
        "Duration" => Value::String(format!("{}s", int(1) / 1_000_000_000)),
        "IntOrString" => {
            if int(1) == 1 {
                Value::String(text(3))
            } else {
                json!(int(2) as i32)
            }
        }
        "Quantity" => Value::String(text(1)),
        _ => {
            // RawExtension / FieldsV1: embedded JSON.
            let raw = bytes.get(&1).copied().unwrap_or(&[]);
            if raw.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(raw).map_err(|e| format!("embedded JSON: {e}"))?
            }
        }
    }))
}

fn decode_value(ty: &str, w: &Wire<'_>, depth: usize) -> Result<Value, String> {
    if is_scalar(ty) {
        return scalar(ty, w);
    }
    match w {
        Wire::Bytes(b) => decode_message(ty, b, depth + 1),
        _ => Err(format!("expected a message for {ty}")),
    }
}

fn packed(ty: &str, b: &[u8]) -> Result<Vec<Value>, String> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while !r.done() {
        let w = match ty {
            "double" => {
                let s = r.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                Wire::Fixed64(u64::from_le_bytes(a))
            }
            "float" => {
                let s = r.take(4)?;
                let mut a = [0u8; 4];
                a.copy_from_slice(s);
                Wire::Fixed32(u32::from_le_bytes(a))
            }
            _ => Wire::Varint(r.varint()?),
        };
        out.push(scalar(ty, &w)?);
    }
    Ok(out)
}

fn decode_message(name: &str, buf: &[u8], depth: usize) -> Result<Value, String> {
    if depth > 64 {
        return Err("message nesting too deep".into());
    }
    if let Some(v) = special(name, buf)? {
        return Ok(v);
    }
    let fields = schema()
        .get(name)
        .ok_or_else(|| format!("unknown protobuf message {name}"))?;
    let mut obj = Map::new();
    let mut r = Reader::new(buf);
    while !r.done() {
        let (num, wire) = r.field()?;
        let Some(f) = fields.get(&num) else {
            continue;
        };
        match f.label {
            b'r' => {
                let entry = obj
                    .entry(f.name)
                    .or_insert_with(|| Value::Array(Vec::new()));
                let values = match (
                    &wire,
                    is_scalar(f.ty) && !matches!(f.ty, "string" | "bytes"),
                ) {
                    (Wire::Bytes(b), true) => packed(f.ty, b)?,
                    _ => vec![decode_value(f.ty, &wire, depth)?],
                };
                if let Value::Array(a) = entry {
                    a.extend(values);
                }
            }
            b'm' => {
                let (kt, vt) = f.ty.split_once('=').unwrap_or(("string", "string"));
                let Wire::Bytes(b) = wire else {
                    return Err("map entry is not length-delimited".into());
                };
                let mut er = Reader::new(b);
                let mut key = Value::String(String::new());
                let mut val = if is_scalar(vt) {
                    scalar_default(vt)
                } else {
                    Value::Object(Map::new())
                };
                while !er.done() {
                    match er.field()? {
                        (1, w) => key = scalar(kt, &w)?,
                        (2, w) => val = decode_value(vt, &w, depth)?,
                        _ => {}
                    }
                }
                let key = match key {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let entry = obj
                    .entry(f.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = entry {
                    m.insert(key, val);
                }
            }
            _ => {
                let v = decode_value(f.ty, &wire, depth)?;
                if is_zero(&v) {
                    obj.remove(f.name);
                } else {
                    obj.insert(f.name.to_string(), v);
                }
            }
        }
    }
    Ok(Value::Object(obj))
}

fn scalar_default(ty: &str) -> Value {
    match ty {
        "string" | "bytes" => Value::String(String::new()),
        "bool" => Value::Bool(false),
        _ => json!(0),
    }
}

fn package_of(api_version: &str) -> Option<&'static str> {
    Some(match api_version {
        "v1" => "k8s.io.api.core.v1",
        "apps/v1" => "k8s.io.api.apps.v1",
        "batch/v1" => "k8s.io.api.batch.v1",
        "rbac.authorization.k8s.io/v1" => "k8s.io.api.rbac.v1",
        "coordination.k8s.io/v1" => "k8s.io.api.coordination.v1",
        "events.k8s.io/v1" => "k8s.io.api.events.v1",
        "authentication.k8s.io/v1" => "k8s.io.api.authentication.v1",
        "autoscaling/v1" => "k8s.io.api.autoscaling.v1",
        "meta.k8s.io/v1" => "k8s.io.apimachinery.pkg.apis.meta.v1",
        _ => return None,
    })
}

/// The protobuf message of `kind` sent as `pkg`'s: its own, else meta/v1's. The option kinds
/// (`DeleteOptions`, ...) are registered in every group version, so client-go's typed clients
/// send a DELETE body as `v1`/`apps/v1` `DeleteOptions`, while the message is meta/v1's.
fn message_name(pkg: &str, kind: &str) -> String {
    const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
    let own = format!("{pkg}.{kind}");
    let meta = format!("{META}.{kind}");
    if !schema().contains_key(own.as_str()) && schema().contains_key(meta.as_str()) {
        meta
    } else {
        own
    }
}

/// Decodes a `k8s\0`-prefixed protobuf body into the equivalent JSON object.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("missing the k8s protobuf magic prefix")?;
    let mut r = Reader::new(rest);
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    while !r.done() {
        match r.field()? {
            (1, Wire::Bytes(tm)) => {
                let mut tr = Reader::new(tm);
                while !tr.done() {
                    match tr.field()? {
                        (1, Wire::Bytes(b)) => {
                            api_version = String::from_utf8_lossy(b).into_owned()
                        }
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into_owned(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let pkg = package_of(&api_version)
        .ok_or_else(|| format!("protobuf for {api_version} is not supported"))?;
    let mut obj = decode_message(&message_name(pkg, &kind), raw, 0)?;
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(api_version));
        m.insert("kind".into(), Value::String(kind));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(num: u64, data: &[u8], out: &mut Vec<u8>) {
        varint(num << 3 | 2, out);
        varint(data.len() as u64, out);
        out.extend_from_slice(data);
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        // ObjectMeta{name: "c1", namespace: "default", creationTimestamp: {}}
        let mut meta = Vec::new();
        bytes_field(1, b"c1", &mut meta);
        bytes_field(3, b"default", &mut meta);
        bytes_field(8, &[], &mut meta);
        // data entry {key: "a", value: "1"}
        let mut entry = Vec::new();
        bytes_field(1, b"a", &mut entry);
        bytes_field(2, b"1", &mut entry);
        let mut cm = Vec::new();
        bytes_field(1, &meta, &mut cm);
        bytes_field(2, &entry, &mut cm);
        let mut tm = Vec::new();
        bytes_field(1, b"v1", &mut tm);
        bytes_field(2, b"ConfigMap", &mut tm);
        let mut unknown = Vec::new();
        bytes_field(1, &tm, &mut unknown);
        bytes_field(2, &cm, &mut unknown);
        let mut body = b"k8s\0".to_vec();
        body.extend_from_slice(&unknown);
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion":"v1","kind":"ConfigMap",
                "metadata":{"name":"c1","namespace":"default"},"data":{"a":"1"}})
        );
    }

    #[test]
    fn decodes_delete_options_sent_in_a_group_version() {
        // What client-go's typed Delete sends (helm's release Secrets): v1 DeleteOptions
        // {propagationPolicy: "Background", preconditions: {uid: "u1"}}.
        let mut pre = Vec::new();
        bytes_field(1, b"u1", &mut pre);
        let mut opts = Vec::new();
        bytes_field(2, &pre, &mut opts);
        bytes_field(4, b"Background", &mut opts);
        for api_version in ["v1", "apps/v1"] {
            let mut tm = Vec::new();
            bytes_field(1, api_version.as_bytes(), &mut tm);
            bytes_field(2, b"DeleteOptions", &mut tm);
            let mut body = b"k8s\0".to_vec();
            bytes_field(1, &tm, &mut body);
            bytes_field(2, &opts, &mut body);
            assert_eq!(
                decode(&body).unwrap(),
                json!({"apiVersion": api_version, "kind": "DeleteOptions",
                    "preconditions": {"uid": "u1"}, "propagationPolicy": "Background"})
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(decode(b"nope").is_err());
        assert!(decode(b"k8s\0\xff").is_err());
    }
}
