//! The client's address, for login locks and the audit log: the peer's, or behind a
//! trusted reverse proxy (`web.trusted_proxies`) the one the proxy forwards. Headers
//! from any other peer are ignored, since anyone can write them.

use std::net::IpAddr;

use axum::http::HeaderMap;

use crate::domain::IpNet;

/// Walks the forwarded chain from the nearest hop back while each hop is a trusted
/// proxy: the first address that is not one is the client. A hop that does not parse
/// ends the walk at the proxy that added it.
pub fn address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let trusts = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !trusts(peer) {
        return peer;
    }
    let mut client = peer;
    for hop in hops(headers).iter().rev() {
        match hop {
            Some(ip) if trusts(client) => client = *ip,
            _ => break,
        }
    }
    client
}

/// The forwarded chain, client first: `X-Forwarded-For`, else RFC 7239 `Forwarded`.
fn hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let joined = |name: &str| -> Option<String> {
        let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
        (!values.is_empty()).then(|| values.join(","))
    };
    if let Some(xff) = joined("x-forwarded-for") {
        return xff.split(',').map(|h| parse_hop(h.trim())).collect();
    }
    let Some(forwarded) = joined("forwarded") else { return Vec::new() };
    forwarded
        .split(',')
        .map(|element| {
            let node = element.split(';').find_map(|pair| {
                let (key, value) = pair.trim().split_once('=')?;
                key.trim().eq_ignore_ascii_case("for").then(|| value.trim().trim_matches('"'))
            });
            node.and_then(parse_hop)
        })
        .collect()
}

/// `192.0.2.60`, `192.0.2.60:4711`, `2001:db8::17` or `[2001:db8::17]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    hop.parse().ok().or_else(|| hop.rsplit_once(':')?.0.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_only_through_trusted_proxies() {
        let proxies: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let spoofed = headers(&[("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(address(ip("203.0.113.9"), &spoofed, &proxies), ip("203.0.113.9"), "an untrusted peer's header");
        assert_eq!(address(ip("10.0.0.2"), &spoofed, &proxies), ip("1.2.3.4"));
        // The client wrote a first hop to frame another address; the proxy appended the real one.
        let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.3")]);
        assert_eq!(address(ip("10.0.0.2"), &chain, &proxies), ip("198.51.100.7"));
        let rfc = headers(&[("forwarded", r#"for="[2001:db8::17]:4711";proto=https, for=10.0.0.3"#)]);
        assert_eq!(address(ip("10.0.0.2"), &rfc, &proxies), ip("2001:db8::17"));
        let port = headers(&[("forwarded", "for=198.51.100.7:5000")]);
        assert_eq!(address(ip("10.0.0.2"), &port, &proxies), ip("198.51.100.7"));
        let hidden = headers(&[("forwarded", "for=_hidden")]);
        assert_eq!(address(ip("10.0.0.2"), &hidden, &proxies), ip("10.0.0.2"), "unknown: the proxy's own");
        assert_eq!(address(ip("10.0.0.2"), &HeaderMap::new(), &[]), ip("10.0.0.2"), "no proxies trusted");
    }
}
