//! [`NodeRef`]s against a server: resolved to its current namespace index at each
//! connect, and written back from the node ids it gives.

use std::str::FromStr;

use async_opcua::types::{Identifier, NamespaceMap, NodeId};

pub use crate::domain::{NODE_FORMAT, NodeRef};

/// The server's namespaces by URI, from its NamespaceArray (`browse::namespace_uris`).
pub fn namespace_map(uris: &[String]) -> NamespaceMap {
    NamespaceMap::new_full(uris.iter().enumerate().map(|(i, u)| (u.clone(), i as u16)).collect())
}

/// The node as the server numbers it now; `None` when the server has no such
/// namespace (then the node cannot exist there).
pub fn resolve(node: &NodeRef, namespaces: &NamespaceMap) -> Option<NodeId> {
    let index = if node.namespace().is_empty() { 0 } else { namespaces.get_index(node.namespace())? };
    NodeId::from_str(&format!("ns={index};{}", node.identifier())).ok()
}

/// A node id as the server gave it, written by its namespace's URI (`uris` is the
/// server's NamespaceArray).
pub fn node_ref(node: &NodeId, uris: &[String]) -> Option<NodeRef> {
    let identifier = match &node.identifier {
        Identifier::Numeric(n) => format!("i={n}"),
        Identifier::String(s) => format!("s={}", s.as_ref()),
        Identifier::Guid(g) => format!("g={g}"),
        Identifier::ByteString(b) => format!("b={}", b.as_base64()),
    };
    let namespace = if node.namespace == 0 { "" } else { uris.get(node.namespace as usize)? };
    NodeRef::from_parts(namespace, &identifier).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_resolves_to_the_index_its_namespace_has_now() {
        let flow = NodeRef::parse("nsu=urn:site:plc;s=PS1.P-101.Flow").unwrap();
        let mut before = NamespaceMap::new();
        before.add_namespace("urn:site:plc");
        let mut after = NamespaceMap::new();
        after.add_namespace("urn:other");
        after.add_namespace("urn:site:plc");
        assert_eq!(resolve(&flow, &before).unwrap().to_string(), "ns=1;s=PS1.P-101.Flow");
        assert_eq!(resolve(&flow, &after).unwrap().to_string(), "ns=2;s=PS1.P-101.Flow");
        assert_eq!(resolve(&flow, &NamespaceMap::new()), None);
        let server = NodeRef::parse("i=2253").unwrap();
        assert_eq!(resolve(&server, &NamespaceMap::new()).unwrap(), NodeId::new(0, 2253u32));
        let uris = vec!["http://opcfoundation.org/UA/".to_string(), "urn:a;b".to_string()];
        assert_eq!(node_ref(&NodeId::new(1, "X"), &uris).unwrap().to_string(), "nsu=urn:a%3bb;s=X");
    }
}
