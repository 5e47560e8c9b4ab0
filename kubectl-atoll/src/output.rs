//! `-o json|yaml`: the objects a page is built from, as a `v1` `List` (what
//! `kubectl get a,b -o json` prints), so that scripts read the API's own fields.

use serde_json::{Value, json};

use crate::Error;
use crate::args::Output;

/// A `v1` `List` of `items`.
pub fn list(items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    })
}

/// The JSON value of each object, in order.
pub fn values<T: serde::Serialize>(objects: &[T]) -> Result<Vec<Value>, Error> {
    objects
        .iter()
        .map(|o| serde_json::to_value(o).map_err(Error::EncodeJson))
        .collect()
}

/// `value` in `format`, ending in a newline.
pub fn encode(value: &Value, format: Output) -> Result<String, Error> {
    match format {
        Output::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(Error::EncodeJson),
        Output::Yaml => serde_yaml::to_string(value).map_err(Error::EncodeYaml),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_encodes_as_kubectl_prints_it() {
        let l = list(vec![json!({"kind": "ManagedCluster"})]);
        let text = encode(&l, Output::Json).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["kind"], "List");
        assert_eq!(back["items"][0]["kind"], "ManagedCluster");
        assert!(text.ends_with("}\n"));
        let yaml = encode(&l, Output::Yaml).unwrap();
        assert!(yaml.contains("kind: List\n"), "{yaml}");
        assert!(yaml.contains("- kind: ManagedCluster\n"), "{yaml}");
    }
}
