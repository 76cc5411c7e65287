//! A protobuf message's fields counted as they lie on the wire, before it is decoded: a
//! field of two bytes (an empty repeated message) decodes into a struct of a hundred, so
//! a 4 MiB call of two million empty descriptors took 270 MiB and a second of CPU to be
//! told it names too many. The front doors count first, without allocating, and refuse
//! what they would refuse after decoding.

/// Reads a base-128 varint off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Calls `each` with the bytes of every length-delimited field `number` of `message`
/// (a repeated message's items, in order) and returns how many there were; `None` when
/// the walk cannot read them: a field past the end, a group (which prost skips over, so a
/// caller must refuse it, or what follows it goes uncounted).
pub fn each_field(message: &[u8], number: u32, mut each: impl FnMut(&[u8])) -> Option<usize> {
    let mut buf = message;
    let mut count = 0;
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        match key & 7 {
            0 => {
                varint(&mut buf)?;
            }
            1 => buf = buf.get(8..)?,
            5 => buf = buf.get(4..)?,
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let payload = buf.get(..len)?;
                buf = &buf[len..];
                if key >> 3 == u64::from(number) {
                    count += 1;
                    each(payload);
                }
            }
            // Groups (deprecated) and the wire types no encoder writes.
            _ => return None,
        }
    }
    Some(count)
}

/// How many fields `number` `message` holds (see [`each_field`]).
pub fn count(message: &[u8], number: u32) -> Option<usize> {
    each_field(message, number, |_| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `field` as a length-delimited field of `number`.
    fn delimited(number: u8, field: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(field.len()).expect("short")];
        out.extend_from_slice(field);
        out
    }

    #[test]
    fn counts_a_repeated_field_among_others_of_every_wire_type() {
        let mut message = delimited(1, b"domain");
        for _ in 0..3 {
            message.extend(delimited(2, &delimited(1, b"")));
        }
        message.extend([3 << 3, 0x96, 0x01]); // a varint, two bytes
        message.extend([4 << 3 | 1, 0, 0, 0, 0, 0, 0, 0, 0]); // fixed 64
        message.extend([5 << 3 | 5, 0, 0, 0, 0]); // fixed 32
        message.extend(delimited(2, b""));
        let mut sizes = Vec::new();
        assert_eq!(each_field(&message, 2, |f| sizes.push(f.len())), Some(4));
        assert_eq!(sizes, [2, 2, 2, 0]);
        assert_eq!(count(&message, 1), Some(1));
        assert_eq!(count(&message, 7), Some(0));
    }

    #[test]
    fn what_the_walk_cannot_read_is_none() {
        for broken in [
            &[2 << 3 | 2, 5, b'a'][..], // shorter than its length
            &[1 << 3 | 3],              // a group
            &[0x80],                    // a key cut short
            &[1 << 3 | 1, 0, 0],        // a fixed 64 cut short
        ] {
            assert_eq!(count(broken, 2), None, "{broken:?}");
        }
        assert_eq!(count(&[], 2), Some(0));
    }
}
