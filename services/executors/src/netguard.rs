//! What network executors may reach. A scope of `*` means the internet: public addresses
//! only. This machine, the home network, link-local and other special-purpose addresses
//! (a router's admin page, a NAS, a cloud metadata endpoint that a prompt-injected page
//! points the LLM at) are reached only through hosts the operator names in
//! `[executors] local_hosts`.
//!
//! Names are judged by the addresses they resolve to, at connect time and on every
//! redirect hop, and the connection goes to exactly the addresses judged: a name that
//! resolves (or rebinds) to 127.0.0.1 is refused like the literal address.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use crate::scope::host_allowed;

/// Why an address is not public, in words; `None` for a public address.
pub fn special_purpose(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => special_v4(v4),
            None => special_v6(v6),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address (this machine)")
    } else if ip.is_private() || (a == 100 && (b & 0xc0) == 64) {
        // 10/8, 172.16/12, 192.168/16; 100.64/10 (carrier-grade NAT)
        Some("a private-network address")
    } else if ip.is_link_local() {
        // 169.254/16, where clouds serve instance metadata
        Some("a link-local address")
    } else if a == 0
        || (a == 192 && b == 0 && c == 0)
        || ip.is_documentation()
        || (a == 198 && (b & 0xfe) == 18)
        || a >= 224
    {
        // this network, IETF assignments, documentation, benchmarking, multicast,
        // reserved, broadcast
        Some("a special-purpose address")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_loopback() {
        Some("a loopback address (this machine)")
    } else if ip.is_unique_local() || (s[0] & 0xffc0) == 0xfec0 {
        // fc00::/7, and the deprecated site-local fec0::/10
        Some("a private-network address")
    } else if ip.is_unicast_link_local() {
        Some("a link-local address")
    } else if ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || (s[0] & 0xe000) != 0x2000
    {
        // multicast, documentation, and everything outside global unicast 2000::/3
        Some("a special-purpose address")
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let pair = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    let compatible = s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified();
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4];
    if compatible || nat64 {
        Some(pair(s[6], s[7]))
    } else if s[0] == 0x2002 {
        Some(pair(s[1], s[2]))
    } else {
        None
    }
}

/// A destination refused: the host, the address it is, and what kind of address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{host}` is {ip}, {kind}; network executors reach such addresses only for hosts named in executors.local_hosts"
)]
pub struct NotPublic {
    pub host: String,
    pub ip: IpAddr,
    pub kind: &'static str,
}

/// The check, with the operator's `local_hosts` (patterns as in scope hosts: `nas.lan`,
/// `*.lan`, `192.168.1.10`).
#[derive(Debug, Clone, Default)]
pub struct NetGuard {
    local_hosts: Arc<[String]>,
}

impl NetGuard {
    pub fn new(local_hosts: &[String]) -> NetGuard {
        NetGuard {
            local_hosts: local_hosts.into(),
        }
    }

    /// Whether `host`, at `ip`, may be reached.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), NotPublic> {
        match special_purpose(ip) {
            Some(kind) if !host_allowed(host, &self.local_hosts) => Err(NotPublic {
                host: host.to_owned(),
                ip,
                kind,
            }),
            _ => Ok(()),
        }
    }

    /// Checks a URL whose host is an address literal (names are checked when resolved).
    pub fn check_url(&self, url: &url::Url) -> Result<(), NotPublic> {
        let ip = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        let host = url.host_str().unwrap_or_default();
        self.check(host.trim_start_matches('[').trim_end_matches(']'), ip)
    }

    /// Resolves `host` and returns its addresses if every one may be reached.
    pub async fn resolve(
        &self,
        host: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn StdError + Send + Sync>> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        for addr in &addrs {
            self.check(host, addr.ip())?;
        }
        Ok(addrs)
    }

    /// The `NotPublic` somewhere in an error's chain of sources.
    pub fn refusal_in<'e>(error: &'e (dyn StdError + 'static)) -> Option<&'e NotPublic> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(refusal) = e.downcast_ref::<NotPublic>() {
                return Some(refusal);
            }
            current = e.source();
        }
        None
    }
}

impl reqwest::dns::Resolve for NetGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        Box::pin(async move {
            let addrs = guard.resolve(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<&'static str> {
        special_purpose(text.parse().unwrap())
    }

    #[test]
    fn public_addresses_pass_and_every_local_or_special_range_is_named() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(kind(public), None, "{public}");
        }
        for (address, expected) in [
            ("127.0.0.1", "a loopback address (this machine)"),
            ("127.1.2.3", "a loopback address (this machine)"),
            ("::1", "a loopback address (this machine)"),
            ("::ffff:127.0.0.1", "a loopback address (this machine)"),
            ("::127.0.0.1", "a loopback address (this machine)"),
            ("2002:7f00:1::", "a loopback address (this machine)"),
            ("10.0.0.1", "a private-network address"),
            ("172.16.5.4", "a private-network address"),
            ("192.168.1.1", "a private-network address"),
            ("100.64.0.1", "a private-network address"),
            ("fd12:3456::1", "a private-network address"),
            ("64:ff9b::c0a8:101", "a private-network address"),
            ("169.254.169.254", "a link-local address"),
            ("fe80::1", "a link-local address"),
            ("0.0.0.0", "a special-purpose address"),
            ("::", "a special-purpose address"),
            ("255.255.255.255", "a special-purpose address"),
            ("224.0.0.1", "a special-purpose address"),
            ("ff02::1", "a special-purpose address"),
            ("192.0.2.1", "a special-purpose address"),
            ("2001:db8::1", "a special-purpose address"),
            ("198.18.0.1", "a special-purpose address"),
        ] {
            assert_eq!(kind(address), Some(expected), "{address}");
        }
    }

    #[test]
    fn local_hosts_open_named_hosts_only() {
        let guard = NetGuard::new(&["nas.lan".into(), "*.home".into(), "127.0.0.1".into()]);
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let lan: IpAddr = "192.168.1.20".parse().unwrap();
        assert!(guard.check("127.0.0.1", loopback).is_ok());
        assert!(guard.check("nas.lan", lan).is_ok());
        assert!(guard.check("printer.home", lan).is_ok());
        let refused = guard.check("evil.example", lan).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "`evil.example` is 192.168.1.20, a private-network address; network executors \
             reach such addresses only for hosts named in executors.local_hosts"
        );
        assert!(guard.check("localhost", loopback).is_err());
        assert!(NetGuard::default().check("127.0.0.1", loopback).is_err());
        assert!(
            NetGuard::default()
                .check("example.com", "93.184.216.34".parse().unwrap())
                .is_ok()
        );
    }
}
