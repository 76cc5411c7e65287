//! Costs known after admission, pure: settling a reservation at the actual cost (a debt
//! or a refund), and drawing units for a body as it streams, within a debt bound. No
//! clock, no storage; `now` and the TAT are arguments.

/// How a settled cost differs from what was reserved at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// More than reserved: `ns` more of the key's time is owed.
    Debt { ns: u64 },
    /// Less than reserved: `ns` of the key's time may be given back, within `room_ns`
    /// (what of this request's reservation is still ahead of now).
    Refund { ns: u64, room_ns: u64 },
}

/// The key's TAT once a reservation is settled at `now`. A debt is owed from whichever
/// is later, the TAT or now (`max(TAT, now) + Δ·T`), so an idle key still pays it, and
/// it never takes the TAT more than `max_debt_ns` past now (unless it already was). A
/// refund gives back at most the part of this request's reservation still ahead of
/// now, and never takes the TAT below now: time that has passed is not returned.
pub fn settle(tat: u64, now: u64, adjustment: Adjustment, max_debt_ns: u64) -> u64 {
    match adjustment {
        Adjustment::Debt { ns } => {
            let owed = tat.max(now).saturating_add(ns);
            owed.min(tat.max(now.saturating_add(max_debt_ns)))
        }
        Adjustment::Refund { ns, room_ns } => {
            if tat <= now {
                return tat;
            }
            tat.saturating_sub(ns.min(room_ns)).max(now)
        }
    }
}

/// What drawing units for a streaming body got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    /// `units` drawn: the key's TAT is now `tat`.
    Granted { units: u64, tat: u64 },
    /// Not even `need` units fit: they will in `wait_ns`.
    Wait { wait_ns: u64 },
}

/// Draws between `need` and `want` units (`t_ns` each) on a key whose TAT is `tat` at
/// `now`, keeping its TAT at most `bound_ns` ahead of now: as many as fit, up to `want`,
/// when at least `need` do. Owed from whichever is later, the TAT or now, like any
/// charge.
pub fn draw(tat: u64, now: u64, t_ns: u64, want: u64, need: u64, bound_ns: u64) -> Drawn {
    let t = t_ns.max(1);
    let start = tat.max(now);
    let ahead = start - now;
    let fits = bound_ns.saturating_sub(ahead) / t;
    if fits < need {
        let wait_ns = ahead
            .saturating_add(need.saturating_mul(t))
            .saturating_sub(bound_ns);
        return Drawn::Wait { wait_ns };
    }
    let units = want.min(fits).max(need);
    Drawn::Granted {
        units,
        tat: start.saturating_add(units.saturating_mul(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn settling_owes_from_now_caps_debts_and_refunds_within_the_room() {
        let now = 100 * S;
        // An idle key still pays a debt, from now.
        assert_eq!(
            settle(50 * S, now, Adjustment::Debt { ns: 5 * S }, u64::MAX),
            now + 5 * S
        );
        assert_eq!(
            settle(now + S, now, Adjustment::Debt { ns: 5 * S }, u64::MAX),
            now + 6 * S
        );
        // Never past now + max_debt, and a debt never lowers a TAT already past it.
        assert_eq!(
            settle(now, now, Adjustment::Debt { ns: 90 * S }, 60 * S),
            now + 60 * S
        );
        assert_eq!(
            settle(now + 70 * S, now, Adjustment::Debt { ns: S }, 60 * S),
            now + 70 * S
        );
        // A refund: at most the room, never below now, nothing for an idle key.
        let refund = |ns, room_ns| Adjustment::Refund { ns, room_ns };
        assert_eq!(
            settle(now + 10 * S, now, refund(4 * S, 8 * S), 0),
            now + 6 * S
        );
        assert_eq!(settle(now + 10 * S, now, refund(4 * S, S), 0), now + 9 * S);
        assert_eq!(settle(now + 10 * S, now, refund(40 * S, 40 * S), 0), now);
        assert_eq!(settle(now - S, now, refund(4 * S, 8 * S), 0), now - S);
    }

    #[test]
    fn drawing_takes_what_fits_within_the_bound_and_names_the_wait_otherwise() {
        let now = 100 * S;
        // Idle key, bound 10 units of 1 s: up to `want`.
        assert_eq!(
            draw(0, now, S, 4, 1, 10 * S),
            Drawn::Granted {
                units: 4,
                tat: now + 4 * S
            }
        );
        // 8 s ahead: 2 fit; want 4, need 1: 2 granted.
        assert_eq!(
            draw(now + 8 * S, now, S, 4, 1, 10 * S),
            Drawn::Granted {
                units: 2,
                tat: now + 10 * S
            }
        );
        // Full: need 3 fits in 3 s.
        assert_eq!(
            draw(now + 10 * S, now, S, 4, 3, 10 * S),
            Drawn::Wait { wait_ns: 3 * S }
        );
        // Never past the bound, whatever `want`.
        let Drawn::Granted { tat, .. } = draw(now + S, now, S, 1_000, 1, 10 * S) else {
            panic!("granted")
        };
        assert_eq!(tat, now + 10 * S);
    }
}
