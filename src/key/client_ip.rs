//! Who the client is: the peer address, or the right-most untrusted hop of
//! X-Forwarded-For when the peer is a trusted proxy.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// The networks whose X-Forwarded-For we believe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self(nets)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Walks X-Forwarded-For from the right while the hop that wrote it is trusted.
    /// The first untrusted address is the client; a malformed entry stops the walk, so a
    /// client can never choose its own address by prepending entries.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = canonical(peer);
        if !self.contains(client) {
            return client;
        }
        // All lines are one list (RFC 9110 §5.3), read as bytes: a junk byte in one
        // entry must not discard the entries a trusted proxy appended after it.
        let hops = headers
            .get_all(http::header::HeaderName::from_static("x-forwarded-for"))
            .iter()
            .rev()
            .flat_map(|value| value.as_bytes().rsplit(|&b| b == b','));
        for hop in hops {
            let hop = std::str::from_utf8(hop.trim_ascii()).ok();
            match hop.and_then(parse_hop) {
                Some(ip) => {
                    client = ip;
                    if !self.contains(ip) {
                        break;
                    }
                }
                None => break,
            }
        }
        client
    }
}

/// IPv4-mapped IPv6 addresses (from dual-stack sockets) are the IPv4 client.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Accepts `1.2.3.4`, `1.2.3.4:5678`, `::1` and `[::1]:5678`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(sock) = hop.parse::<std::net::SocketAddr>() {
        return Some(canonical(sock.ip()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().expect("header value"));
        }
        h
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::new(vec![
            "127.0.0.1/32".parse().expect("net"),
            "10.0.0.0/8".parse().expect("net"),
        ])
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let peer: IpAddr = "203.0.113.9".parse().expect("ip");
        assert_eq!(trusted().client_ip(peer, &xff(&["1.1.1.1"])), peer);
    }

    #[test]
    fn right_most_untrusted_hop_wins() {
        let peer: IpAddr = "127.0.0.1".parse().expect("ip");
        let h = xff(&["6.6.6.6, 198.51.100.7", "10.1.2.3"]);
        assert_eq!(
            trusted().client_ip(peer, &h),
            "198.51.100.7".parse::<IpAddr>().expect("ip")
        );
    }

    #[test]
    fn garbage_stops_the_walk() {
        let peer: IpAddr = "127.0.0.1".parse().expect("ip");
        let h = xff(&["6.6.6.6, not-an-ip, 10.0.0.5"]);
        assert_eq!(
            trusted().client_ip(peer, &h),
            "10.0.0.5".parse::<IpAddr>().expect("ip")
        );
    }

    #[test]
    fn lines_are_one_list_and_junk_bytes_stay_in_their_entry() {
        let peer: IpAddr = "127.0.0.1".parse().expect("ip");
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"1.1.1.1, \xff\xfe, 198.51.100.7").expect("obs-text"),
        );
        assert_eq!(
            trusted().client_ip(peer, &h),
            "198.51.100.7".parse::<IpAddr>().expect("ip")
        );
        let h = xff(&["6.6.6.6", "198.51.100.8", "10.0.0.1"]);
        assert_eq!(
            trusted().client_ip(peer, &h),
            "198.51.100.8".parse::<IpAddr>().expect("ip")
        );
    }

    #[test]
    fn mapped_v6_peer_is_ipv4() {
        let peer: IpAddr = "::ffff:127.0.0.1".parse().expect("ip");
        let h = xff(&["[2001:db8::1]:443"]);
        assert_eq!(
            trusted().client_ip(peer, &h),
            "2001:db8::1".parse::<IpAddr>().expect("ip")
        );
    }
}
