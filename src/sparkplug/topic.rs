//! The Sparkplug B topic namespace: `spBv1.0/{group}/{type}/{edge node}[/{device}]`,
//! and `spBv1.0/STATE/{host}` for host applications.

use std::fmt;

pub const NAMESPACE: &str = "spBv1.0";

/// The message types a host application takes, and those it leaves alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NBirth,
    NDeath,
    NData,
    DBirth,
    DDeath,
    DData,
    /// Commands to edge nodes and devices, and other hosts' STATE: not ours to take.
    Command,
    State,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NBirth => "NBIRTH",
            Kind::NDeath => "NDEATH",
            Kind::NData => "NDATA",
            Kind::DBirth => "DBIRTH",
            Kind::DDeath => "DDEATH",
            Kind::DData => "DDATA",
            Kind::Command => "CMD",
            Kind::State => "STATE",
        }
    }

    /// Whether the message is about a device (its topic has a device id).
    pub fn of_device(self) -> bool {
        matches!(self, Kind::DBirth | Kind::DDeath | Kind::DData)
    }
}

/// A parsed Sparkplug topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub group: String,
    pub kind: Kind,
    pub edge_node: String,
    /// Empty for the edge node's own messages.
    pub device: String,
}

impl Topic {
    /// Parses `topic`, or says what is wrong with it.
    pub fn parse(topic: &str) -> Result<Topic, String> {
        let parts: Vec<&str> = topic.split('/').collect();
        if parts.first() != Some(&NAMESPACE) {
            return Err(format!("'{topic}' is not in the Sparkplug B namespace ({NAMESPACE}/...)"));
        }
        if parts.get(1) == Some(&"STATE") {
            return Ok(Topic {
                group: String::new(),
                kind: Kind::State,
                edge_node: parts[2..].join("/"),
                device: String::new(),
            });
        }
        let kind = match parts.get(2).copied() {
            Some("NBIRTH") => Kind::NBirth,
            Some("NDEATH") => Kind::NDeath,
            Some("NDATA") => Kind::NData,
            Some("DBIRTH") => Kind::DBirth,
            Some("DDEATH") => Kind::DDeath,
            Some("DDATA") => Kind::DData,
            Some("NCMD" | "DCMD") => Kind::Command,
            _ => {
                return Err(format!(
                    "'{topic}': the third level is the message type (NBIRTH, NDATA, NDEATH, DBIRTH, DDATA, DDEATH)"
                ));
            }
        };
        let want = if kind.of_device() { 5 } else { 4 };
        if parts.len() != want && kind != Kind::Command || parts.iter().take(want).any(|p| p.is_empty()) {
            return Err(format!(
                "'{topic}': a {} topic is {NAMESPACE}/group/{}/edge_node{}",
                kind.as_str(),
                kind.as_str(),
                if kind.of_device() { "/device" } else { "" }
            ));
        }
        Ok(Topic {
            group: parts[1].to_string(),
            kind,
            edge_node: parts[3].to_string(),
            device: parts.get(4).filter(|_| kind.of_device()).map_or(String::new(), |d| d.to_string()),
        })
    }

    /// `group/edge_node`, or `group/edge_node/device`: how messages name the sender.
    pub fn sender(&self) -> String {
        if self.device.is_empty() {
            format!("{}/{}", self.group, self.edge_node)
        } else {
            format!("{}/{}/{}", self.group, self.edge_node, self.device)
        }
    }

    /// Where a rebirth request for this message's edge node goes.
    pub fn ncmd(&self) -> String {
        ncmd(&self.group, &self.edge_node)
    }
}

/// Where commands to edge node `edge_node` of `group` go (a rebirth request, say).
pub fn ncmd(group: &str, edge_node: &str) -> String {
    format!("{NAMESPACE}/{group}/NCMD/{edge_node}")
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.sender())
    }
}

/// The subscriptions of a host application for `groups` (all groups when empty): the
/// births, data and deaths, not the commands or the STATE of hosts.
pub fn filters(groups: &[String]) -> Vec<String> {
    let groups: Vec<&str> = if groups.is_empty() { vec!["+"] } else { groups.iter().map(String::as_str).collect() };
    let mut out = Vec::new();
    for g in groups {
        for kind in ["NBIRTH", "NDATA", "NDEATH"] {
            out.push(format!("{NAMESPACE}/{g}/{kind}/+"));
        }
        for kind in ["DBIRTH", "DDATA", "DDEATH"] {
            out.push(format!("{NAMESPACE}/{g}/{kind}/+/+"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_parse_and_say_what_is_wrong() {
        let t = Topic::parse("spBv1.0/Plant A/DDATA/Gateway 1/PLC-3").unwrap();
        assert_eq!(
            (t.group.as_str(), t.kind, t.edge_node.as_str(), t.device.as_str()),
            ("Plant A", Kind::DData, "Gateway 1", "PLC-3")
        );
        assert_eq!(t.sender(), "Plant A/Gateway 1/PLC-3");
        assert_eq!(t.ncmd(), "spBv1.0/Plant A/NCMD/Gateway 1");
        let n = Topic::parse("spBv1.0/G/NBIRTH/E").unwrap();
        assert_eq!((n.kind, n.device.as_str()), (Kind::NBirth, ""));
        assert_eq!(Topic::parse("spBv1.0/STATE/scada-host").unwrap().kind, Kind::State);
        assert_eq!(Topic::parse("spBv1.0/G/NCMD/E").unwrap().kind, Kind::Command);
        assert!(Topic::parse("spBv1.0/G/DDATA/E").unwrap_err().contains("edge_node/device"));
        assert!(Topic::parse("spBv1.0/G/NDATA/E/extra").is_err());
        assert!(Topic::parse("spBv1.0/G/WHAT/E").unwrap_err().contains("message type"));
        assert!(Topic::parse("scada/x").is_err());
        assert!(Topic::parse("spBv1.0//NDATA/E").is_err(), "an empty level");
    }

    #[test]
    fn filters_cover_births_data_and_deaths_of_the_groups() {
        assert_eq!(filters(&[]).len(), 6);
        assert!(filters(&[]).contains(&"spBv1.0/+/DDATA/+/+".to_string()));
        let two = filters(&["North".into(), "South".into()]);
        assert_eq!(two.len(), 12);
        assert!(two.contains(&"spBv1.0/South/NDEATH/+".to_string()));
    }
}
