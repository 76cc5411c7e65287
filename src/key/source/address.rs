//! The client's address as a key part: whole (`ip`), or an IPv6 address cut to the
//! network its holder controls (`ip/64`), and the one spelling an operator's text is
//! matched in (the admin API, the config's overrides), whatever way it was typed.

use std::borrow::Cow;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv6Net};

use super::KeyPart;
use crate::key::client_ip::canonical;

/// The key part of `ip` under `ip/{len}`: an IPv6 address cut to its first `len` bits
/// (`2001:db8:1:2::/64`), an IPv4 address whole (one client rarely holds more than one).
pub(super) fn prefix_part(ip: IpAddr, len: u8) -> KeyPart<'static> {
    match ip {
        IpAddr::V6(v6) => {
            Ipv6Net::new(v6, len).map_or(KeyPart::Ip(ip), |net| KeyPart::Net(net.trunc()))
        }
        v4 => KeyPart::Ip(v4),
    }
}

/// `typed` as an `ip` key spells it: an address in its canonical text (`2001:db8::1` for
/// `2001:DB8:0::1`, `192.0.2.1` for `::ffff:192.0.2.1`); text that is no address as typed
/// (it names no client, so no key a request makes).
pub(super) fn spelled_ip(typed: &str) -> Cow<'_, str> {
    match typed.parse::<IpAddr>() {
        Ok(ip) => Cow::Owned(canonical(ip).to_string()),
        Err(_) => Cow::Borrowed(typed),
    }
}

/// `typed` as an `ip/{len}` key spells it: an address, or a network no wider than the
/// key's, names the network it falls in (`2001:db8:1:2::5` and `2001:db8:1:2::/80` are
/// `2001:db8:1:2::/64` under `ip/64`); an IPv4 address (or its `/32`) is itself. `None`
/// for anything else: a wider network holds many keys, not one.
pub(super) fn spelled_prefix(typed: &str, len: u8) -> Option<String> {
    if let Ok(ip) = typed.parse::<IpAddr>() {
        return Some(prefix_part(canonical(ip), len).as_text().into_owned());
    }
    match typed.parse::<IpNet>().ok()? {
        IpNet::V6(net) if net.prefix_len() >= len => Some(
            prefix_part(IpAddr::V6(net.addr()), len)
                .as_text()
                .into_owned(),
        ),
        IpNet::V4(net) if net.prefix_len() == 32 => Some(net.addr().to_string()),
        _ => None,
    }
}

/// The text of an address or network key part, written on the stack: hashed on every
/// request, where a `String` would allocate.
pub(super) fn write_text(part: &impl std::fmt::Display, buf: &mut [u8; 48]) -> usize {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{part}");
    cursor.position() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_address_is_keyed_by_its_network_and_an_ipv4_address_whole() {
        let part = |ip: &str, len| {
            prefix_part(ip.parse().expect("ip"), len)
                .as_text()
                .into_owned()
        };
        assert_eq!(part("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::/64");
        assert_eq!(part("2001:db8:1:2:ffff::9", 64), "2001:db8:1:2::/64");
        assert_eq!(part("2001:db8:1:3::1", 64), "2001:db8:1:3::/64");
        assert_eq!(part("2001:db8:1:2ff::1", 56), "2001:db8:1:200::/56");
        assert_eq!(part("2001:db8::1", 128), "2001:db8::1/128");
        assert_eq!(part("192.0.2.7", 64), "192.0.2.7");
    }

    #[test]
    fn an_operator_may_type_any_address_of_the_network_or_the_network() {
        for typed in [
            "2001:db8:1:2::5",
            "2001:DB8:1:2:0::",
            "2001:db8:1:2::/64",
            "2001:db8:1:2:3::/80",
        ] {
            assert_eq!(
                spelled_prefix(typed, 64).as_deref(),
                Some("2001:db8:1:2::/64"),
                "{typed}"
            );
        }
        assert_eq!(
            spelled_prefix("::ffff:192.0.2.1", 64).as_deref(),
            Some("192.0.2.1")
        );
        assert_eq!(
            spelled_prefix("192.0.2.1/32", 64).as_deref(),
            Some("192.0.2.1")
        );
        for wrong in [
            "2001:db8::/48",
            "192.0.2.0/24",
            "alice",
            "",
            "2001:db8::/129",
        ] {
            assert_eq!(spelled_prefix(wrong, 64), None, "{wrong}");
        }
        assert_eq!(spelled_ip("2001:DB8:0::1"), "2001:db8::1");
        assert_eq!(spelled_ip("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(spelled_ip("not an address"), "not an address");
    }
}
