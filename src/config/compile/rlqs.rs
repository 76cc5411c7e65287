//! `[[rlqs.buckets]]`: which policy shares out which of Envoy's quota buckets, answered on
//! the `[rls]` listener.

use super::*;
use crate::config::raw::{RawRlqs, RawRlqsBucket, RawRlsRule};
use crate::config::rlqs::{RlqsBucket, RlqsBuckets};

/// Envoy 1.40 reports every 5 s whatever its filter says; an assignment must outlive the
/// gap to be renewed before it expires.
const REPORT_GAP: Duration = Duration::from_secs(5);

impl Compiler {
    /// The buckets of `[rlqs]` (needs `[rls]`, whose listener answers them).
    pub(super) fn rlqs(
        &mut self,
        raw: RawRlqs,
        has_rls: bool,
        (policies, defined): (&BTreeMap<String, Arc<Policy>>, &Defined),
    ) -> RlqsBuckets {
        if let (false, Some(first)) = (has_rls, raw.buckets.first()) {
            self.error(
                first.span(),
                "[rlqs] is answered on the [rls] listener, and there is none",
                Some(
                    "add [rls] listen = \"127.0.0.1:8081\" (Envoy's rlqs_server points there)"
                        .to_owned(),
                ),
            );
        }
        let mut buckets = Vec::new();
        let mut seen = HashSet::new();
        for b in raw.buckets {
            let span = b.span();
            let Some(bucket) = self.rlqs_bucket(b.into_inner(), policies, defined) else {
                continue;
            };
            let mut keys: Vec<_> = bucket.rule.entries.clone();
            keys.sort_by(|a, b| a.key.cmp(&b.key));
            if !seen.insert((bucket.rule.domain.clone(), keys)) {
                self.error(
                    span,
                    format!(
                        "two [[rlqs.buckets]] entries name the bucket `{}`",
                        bucket.rule.describe()
                    ),
                    Some("a bucket is shared out by one policy: keep one of them".to_owned()),
                );
                continue;
            }
            buckets.push(bucket);
        }
        RlqsBuckets::new(buckets)
    }

    fn rlqs_bucket(
        &mut self,
        raw: RawRlqsBucket,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
    ) -> Option<RlqsBucket> {
        let ttl = match &raw.assignment_ttl {
            Some(t) => self.assignment_ttl(t),
            None => Some(Duration::from_secs(10)),
        };
        let rule = self.rls_rule(
            RawRlsRule {
                domain: raw.domain,
                descriptor: raw.bucket,
                policy: raw.policy,
                reports: None,
            },
            policies,
            defined,
        );
        Some(RlqsBucket {
            rule: rule?,
            ttl: ttl?,
        })
    }

    /// Whole seconds, at least one (Envoy 1.40 drops the rest: 0.9 s expires at once).
    fn assignment_ttl(&mut self, raw: &S<String>) -> Option<Duration> {
        let ttl = self.duration(raw, false)?;
        if ttl.subsec_nanos() != 0 || ttl.is_zero() {
            self.error(
                raw.span(),
                format!("assignment_ttl {} is not a whole number of seconds", raw.get_ref()),
                Some("Envoy 1.40 reads whole seconds of a TTL (0.9s expires at once): write e.g. \"10s\"".to_owned()),
            );
            return None;
        }
        if ttl <= REPORT_GAP {
            self.warn(
                raw.span(),
                format!("assignment_ttl {} is no longer than the 5 s between Envoy's reports", raw.get_ref()),
                Some("an assignment is renewed when Envoy reports (every 5 s in Envoy 1.40): one that expires first leaves Envoy on its expired_assignment_behavior in between; use 10s or more".to_owned()),
            );
        }
        Some(ttl)
    }
}

#[cfg(test)]
mod tests {
    fn rlqs(ttl: &str) -> Result<crate::config::Config, String> {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [policies.tenant]\nkey = \"header:x-tenant\"\nlimit = 10\nperiod = \"1s\"\nburst = 10\n\
             [[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"u\"\npolicies = [\"tenant\"]\n\
             [upstreams.u]\ntargets = [\"http://127.0.0.1:1\"]\n\
             [rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\n\
             assignment_ttl = \"{ttl}\"\n"
        );
        crate::config::compile(std::path::Path::new("t.toml"), &text).map_err(|e| e.to_string())
    }

    #[test]
    fn an_assignment_ttl_is_whole_seconds_and_at_least_one() {
        let config = rlqs("10s").expect("whole seconds");
        let rls = config.rls.expect("rls");
        let ttl = rls.buckets.iter().next().expect("a bucket").ttl;
        assert_eq!(ttl, std::time::Duration::from_secs(10));
        for (ttl, says) in [
            (
                "1500ms",
                "assignment_ttl 1500ms is not a whole number of seconds",
            ),
            (
                "0.9s",
                "assignment_ttl 0.9s is not a whole number of seconds",
            ),
            ("0s", "duration must be greater than zero"),
        ] {
            let e = rlqs(ttl).expect_err(ttl);
            assert!(e.contains(says) && e.contains("t.toml:21:"), "{ttl}: {e}");
        }
    }
}
