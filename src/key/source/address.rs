//! The client's address as a key part: whole (`ip`), or an IPv6 address cut to the
//! network its holder controls (`ip/64`), and the one spelling an operator's text is
//! matched in (the admin API, the config's overrides), whatever way it was typed.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv6Net};

use super::part::{write_text, KeyPart};
use crate::key::client_ip::canonical;

/// The key part of `ip` under `ip/{len}`: an IPv6 address cut to its first `len` bits
/// (`2001:db8:1:2::/64`), an IPv4 address whole (one client rarely holds more than one).
/// An IPv6 address that carries an IPv4 client's address is that client
/// ([`embedded_ipv4`]).
pub(super) fn prefix_part(ip: IpAddr, len: u8) -> KeyPart<'static> {
    match ip {
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(v4) => KeyPart::Ip(IpAddr::V4(v4)),
            None => Ipv6Net::new(v6, len).map_or(KeyPart::Ip(ip), |net| KeyPart::Net(net.trunc())),
        },
        v4 => KeyPart::Ip(v4),
    }
}

/// The IPv4 address an IPv6 address stands for, where the IPv6 network is not the
/// client's own: NAT64's well-known prefix (`64:ff9b::/96`, RFC 6052), where every IPv4
/// client of a NAT64 gateway would otherwise share `64:ff9b::/64`; 6to4 (`2002::/16`,
/// RFC 3056), where one IPv4 address holds a /48 of 65,536 /64s; Teredo (`2001::/32`,
/// RFC 4380), where every client of a Teredo server shares one /64 and its own public
/// address is the last 32 bits, inverted.
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let low = (u128::from(v6) & 0xffff_ffff) as u32;
    match v6.segments() {
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(Ipv4Addr::from(low)),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!low)),
        _ => None,
    }
}

/// `typed` as an `ip` key spells it: an address in its canonical text (`2001:db8::1` for
/// `2001:DB8:0::1`, `192.0.2.1` for `::ffff:192.0.2.1`); text that is no address as typed
/// (it names no client, so no key a request makes). Borrowed when already so spelled.
pub(super) fn spelled_ip(typed: &str) -> Cow<'_, str> {
    let Ok(ip) = typed.parse::<IpAddr>() else {
        return Cow::Borrowed(typed);
    };
    let ip = canonical(ip);
    let mut buf = [0u8; 48];
    let len = write_text(&ip, &mut buf);
    if &buf[..len] == typed.as_bytes() {
        Cow::Borrowed(typed)
    } else {
        Cow::Owned(ip.to_string())
    }
}

/// `typed` as an `ip/{len}` key spells it: an address, or a network no wider than the
/// key's, names the network it falls in (`2001:db8:1:2::5` and `2001:db8:1:2::/80` are
/// `2001:db8:1:2::/64` under `ip/64`); an IPv4 address (or its `/32`, or an IPv6 form
/// of it) is itself. `None` for anything else: a wider network holds many keys.
pub(super) fn spelled_prefix(typed: &str, len: u8) -> Option<String> {
    if let Ok(ip) = typed.parse::<IpAddr>() {
        return Some(prefix_part(canonical(ip), len).as_text().into_owned());
    }
    match typed.parse::<IpNet>().ok()? {
        // An IPv4 client, however written: only its single address is one key.
        IpNet::V4(net) if net.prefix_len() == 32 => Some(net.addr().to_string()),
        IpNet::V6(net) if net.prefix_len() == 128 => spelled_prefix(&net.addr().to_string(), len),
        // A network of IPv4 clients (NAT64's, 6to4's, Teredo's) holds many keys. One that
        // only overlaps such a range is named by its own network (`64:ff9b::/64`, the key
        // of `64:ff9b::1:0:0:5`, which is no NAT64 address).
        IpNet::V6(net) if net.prefix_len() >= len && !within_embedding(net) => {
            Ipv6Net::new(net.addr(), len)
                .ok()
                .map(|n| n.trunc().to_string())
        }
        _ => None,
    }
}

/// Whether every address of `net` stands for an IPv4 client: IPv4-mapped, or
/// [`embedded_ipv4`]'s.
fn within_embedding(net: Ipv6Net) -> bool {
    ["::ffff:0:0/96", "64:ff9b::/96", "2002::/16", "2001::/32"]
        .iter()
        .filter_map(|range| range.parse::<Ipv6Net>().ok())
        .any(|range| range.contains(&net))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(ip: &str, len: u8) -> String {
        prefix_part(ip.parse().expect("ip"), len)
            .as_text()
            .into_owned()
    }

    #[test]
    fn an_ipv6_address_is_keyed_by_its_network_and_an_ipv4_address_whole() {
        assert_eq!(part("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::/64");
        assert_eq!(part("2001:db8:1:2:ffff::9", 64), "2001:db8:1:2::/64");
        assert_eq!(part("2001:db8:1:3::1", 64), "2001:db8:1:3::/64");
        assert_eq!(part("2001:db8:1:2ff::1", 56), "2001:db8:1:200::/56");
        assert_eq!(part("2001:db8::1", 128), "2001:db8::1/128");
        assert_eq!(part("192.0.2.7", 64), "192.0.2.7");
    }

    #[test]
    fn an_ipv6_address_standing_for_an_ipv4_client_is_that_client() {
        // The translation prefix: not one bucket for every IPv4 client of a translator.
        assert_eq!(part("64:ff9b::192.0.2.7", 64), "192.0.2.7");
        assert_eq!(part("64:ff9b::198.51.100.1", 64), "198.51.100.1");
        // 6to4: not 65,536 /64s for one IPv4 address.
        assert_eq!(part("2002:c000:0207::1", 64), "192.0.2.7");
        assert_eq!(part("2002:c000:0207:ffff::1", 64), "192.0.2.7");
        // Teredo: the client's public address, inverted in the last 32 bits.
        assert_eq!(
            part("2001:0:4136:e378:8000:63bf:3fff:fdd2", 64),
            "192.0.2.45"
        );
        // A NAT64 prefix of the operator's own is a network like any other.
        assert_eq!(part("2001:db8:64::192.0.2.7", 64), "2001:db8:64::/64");
    }

    #[test]
    fn an_operator_may_type_any_address_of_the_network_or_the_network() {
        for typed in [
            "2001:db8:1:2::5",
            "2001:DB8:1:2:0::",
            "2001:db8:1:2::/64",
            "2001:db8:1:2:3::/80",
        ] {
            let spelled = spelled_prefix(typed, 64);
            assert_eq!(spelled.as_deref(), Some("2001:db8:1:2::/64"), "{typed}");
        }
        for (typed, v4) in [
            ("::ffff:192.0.2.1", "192.0.2.1"),
            ("192.0.2.1/32", "192.0.2.1"),
            ("::ffff:192.0.2.1/128", "192.0.2.1"),
            ("64:ff9b::192.0.2.1", "192.0.2.1"),
        ] {
            assert_eq!(spelled_prefix(typed, 64).as_deref(), Some(v4), "{typed}");
        }
        // The key of `64:ff9b::1:0:0:5` (no NAT64 address) and of a 2001:0-7:: client
        // under `ip/29` are named back.
        assert_eq!(
            spelled_prefix("64:ff9b::/64", 64).as_deref(),
            Some("64:ff9b::/64")
        );
        assert_eq!(part("64:ff9b::1:0:0:5", 64), "64:ff9b::/64");
        assert_eq!(
            spelled_prefix("2000::/29", 29).as_deref(),
            Some("2000::/29")
        );
        for wrong in [
            "2001:db8::/48",
            "192.0.2.0/24",
            "::ffff:192.0.2.0/120",
            "64:ff9b::192.0.2.0/120",
            "2002:c000:207::/48",
            "alice",
            "",
            "2001:db8::/129",
        ] {
            assert_eq!(spelled_prefix(wrong, 64), None, "{wrong}");
        }
        assert_eq!(spelled_ip("2001:DB8:0::1"), "2001:db8::1");
        assert_eq!(spelled_ip("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(spelled_ip("not an address"), "not an address");
        assert!(matches!(spelled_ip("2001:db8::1"), Cow::Borrowed(_)));
    }
}
