//! An OPC UA node id as a site writes it: by namespace URI
//! (`nsu=urn:site:plc;s=PS1.P-101.Flow`), never by namespace index alone, since a
//! server's restart or upgrade may renumber its namespaces. Namespace 0 (the
//! standard's own) is fixed, so `i=2253` is allowed. `opcua::node` resolves it to the
//! server's current index at each connect.

use std::fmt;

/// A node id by namespace URI (or in namespace 0), validated on construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRef {
    /// Empty for namespace 0.
    namespace: String,
    /// The identifier as written: `i=85`, `s=PS1.Flow`, `g=...`, `b=...`.
    identifier: String,
}

/// The form a node id is written in, for messages.
pub const NODE_FORMAT: &str = "nsu=<namespace URI>;s=<name> (or i=<number>, g=<guid>, b=<base64>); \
    a node of the standard's namespace 0 may be written i=<number> alone, e.g. i=2253 for the Server object";

impl NodeRef {
    pub fn parse(text: &str) -> Result<NodeRef, String> {
        let text = text.trim();
        let (namespace, identifier) = if let Some(rest) = text.strip_prefix("nsu=") {
            let Some((uri, identifier)) = rest.split_once(';') else {
                return Err(format!("node id '{text}' has a namespace URI and no identifier; write {NODE_FORMAT}"));
            };
            if uri.is_empty() {
                return Err(format!("node id '{text}' has an empty namespace URI; write {NODE_FORMAT}"));
            }
            (uri.replace("%3b", ";").replace("%25", "%"), identifier)
        } else if let Some(rest) = text.strip_prefix("ns=") {
            match rest.split_once(';') {
                Some(("0", identifier)) => (String::new(), identifier),
                _ => {
                    return Err(format!(
                        "node id '{text}' names its namespace by index, which a server's restart may renumber; \
                         write {NODE_FORMAT} (`twinops opcua browse` writes each node's)"
                    ));
                }
            }
        } else {
            (String::new(), text)
        };
        if !identifier_ok(identifier) {
            return Err(format!("node id '{text}': '{identifier}' is not an identifier; write {NODE_FORMAT}"));
        }
        Ok(NodeRef { namespace, identifier: identifier.to_string() })
    }

    /// A node id from its parts as a server gives them (`identifier` as `i=5`, `s=X`).
    pub fn from_parts(namespace: &str, identifier: &str) -> Result<NodeRef, String> {
        if !identifier_ok(identifier) {
            return Err(format!("'{identifier}' is not a node identifier; write {NODE_FORMAT}"));
        }
        Ok(NodeRef { namespace: namespace.to_string(), identifier: identifier.to_string() })
    }

    /// The namespace's URI; empty for namespace 0.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `i=85`, `s=PS1.Flow`, ...
    pub fn identifier(&self) -> &str {
        &self.identifier
    }
}

/// `i=<u32>`, `s=<text>`, `g=<guid>`, `b=<base64>`, as OPC UA Part 6 writes them.
fn identifier_ok(identifier: &str) -> bool {
    let Some((kind, value)) = identifier.split_once('=') else { return false };
    match kind {
        "i" => value.parse::<u32>().is_ok(),
        "s" => !value.is_empty(),
        "g" => {
            let groups: Vec<&str> = value.split('-').collect();
            groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
                && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "b" => !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')),
        _ => false,
    }
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.identifier)
        } else {
            write!(f, "nsu={};{}", self.namespace.replace('%', "%25").replace(';', "%3b"), self.identifier)
        }
    }
}

impl<'de> serde::Deserialize<'de> for NodeRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeRef::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_written_by_namespace_uri() {
        let flow = NodeRef::parse("nsu=urn:site:plc;s=PS1.P-101.Flow").unwrap();
        assert_eq!(flow.to_string(), "nsu=urn:site:plc;s=PS1.P-101.Flow");
        assert_eq!((flow.namespace(), flow.identifier()), ("urn:site:plc", "s=PS1.P-101.Flow"));
        assert_eq!(NodeRef::parse("ns=0;i=85").unwrap().to_string(), "i=85");
        let odd = NodeRef::from_parts("urn:a;b", "g=72962B91-FA75-4AE6-8D28-B404DC7DAF63").unwrap();
        assert_eq!(odd.to_string(), "nsu=urn:a%3bb;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63");
        assert_eq!(NodeRef::parse(&odd.to_string()).unwrap(), odd);
    }

    #[test]
    fn an_index_alone_or_a_malformed_id_is_refused_with_the_form_to_use() {
        for bad in ["ns=2;s=Flow", "nsu=urn:x", "nsu=;s=X", "q=5", "nsu=urn:x;i=notanumber", "", "s=", "g=123"] {
            let e = NodeRef::parse(bad).unwrap_err();
            assert!(e.contains("nsu=<namespace URI>"), "{bad}: {e}");
        }
    }
}
