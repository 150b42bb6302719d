//! Networks, for `web.trusted_proxies`.

use std::net::IpAddr;
use std::str::FromStr;

/// An address or a network in CIDR notation: `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(s: &str) -> Result<IpNet, String> {
        let bad = || format!("'{s}' is not an address or network like 10.0.0.5, 10.0.0.0/8 or fd00::/8");
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(IpNet { addr, prefix })
    }
}

impl<'de> serde::Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::IpNet;

    #[test]
    fn addresses_and_networks() {
        let net: IpNet = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains("10.200.1.2".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.1.1".parse().unwrap()), "an IPv4-mapped peer");
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        let one: IpNet = "192.168.1.5".parse().unwrap();
        assert!(one.contains("192.168.1.5".parse().unwrap()) && !one.contains("192.168.1.6".parse().unwrap()));
        let v6: IpNet = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()) && !v6.contains("fe80::1".parse().unwrap()));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "proxy.local", "10.0.0/8", ""] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }
}
