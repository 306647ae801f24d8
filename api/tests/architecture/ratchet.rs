//! The allowlists of today's known violations are a ratchet: a check fails
//! on a violation the list does not name (the rule holds from now on) and
//! on a listed one that no longer occurs (take it off: the rule now holds
//! there, and must keep holding).

use crate::source::RULES_DOC;
use crate::workspace::Finding;
use std::collections::{BTreeMap, BTreeSet};

/// A rule as its failure message states it.
pub struct Rule {
    /// What holds, in one sentence.
    pub statement: &'static str,
    /// What to do about a new violation.
    pub remedy: &'static str,
    /// The module that holds the allowlist.
    pub allowlist_in: &'static str,
}

/// Fails naming every finding the allowlist (file, item) does not hold and
/// every entry that matches no finding.
pub fn ratchet(rule: &Rule, findings: &[Finding], allowlist: &[(&str, &str)]) {
    let mut found: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for f in findings {
        found
            .entry((f.file.as_str(), f.item.as_str()))
            .or_default()
            .push(f.detail.as_str());
    }
    let allowed: BTreeSet<(&str, &str)> = allowlist.iter().copied().collect();
    assert_eq!(
        allowed.len(),
        allowlist.len(),
        "{}: an entry is listed twice",
        rule.allowlist_in
    );
    let new: Vec<String> = found
        .iter()
        .filter(|(key, _)| !allowed.contains(*key))
        .map(|((file, item), details)| format!("  {file}: {item}: {}", details.join("; ")))
        .collect();
    let stale: Vec<String> = allowed
        .iter()
        .filter(|key| !found.contains_key(*key))
        .map(|(file, item)| format!("  ({file:?}, {item:?}),"))
        .collect();
    let mut message = String::new();
    if !new.is_empty() {
        message += &format!(
            "{} new violation(s) of the rule: {}\n{}\n{}\n",
            new.len(),
            rule.statement,
            new.join("\n"),
            rule.remedy
        );
    }
    if !stale.is_empty() {
        message += &format!(
            "{} allowlisted violation(s) no longer occur: remove them from the allowlist in \
             {} (the rule now holds there: {})\n{}\n",
            stale.len(),
            rule.allowlist_in,
            rule.statement,
            stale.join("\n")
        );
    }
    assert!(
        message.is_empty(),
        "{message}The rule is documented in {RULES_DOC}."
    );
}

#[test]
fn the_ratchet_fails_on_new_violations_and_on_stale_entries() {
    let rule = Rule {
        statement: "the rule",
        remedy: "fix it",
        allowlist_in: "here.rs",
    };
    let found = |file: &str, item: &str| Finding {
        file: file.into(),
        item: item.into(),
        detail: "where".into(),
    };
    let failure = |findings: Vec<Finding>, allowlist: &[(&str, &str)]| {
        std::panic::catch_unwind(|| ratchet(&rule, &findings, allowlist))
            .err()
            .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
    };
    assert_eq!(failure(vec![found("a.rs", "f")], &[("a.rs", "f")]), None);
    let new = failure(
        vec![found("a.rs", "f"), found("b.rs", "g")],
        &[("a.rs", "f")],
    )
    .expect("a new violation fails");
    assert!(
        new.contains("1 new violation(s) of the rule: the rule\n  b.rs: g: where"),
        "{new}"
    );
    let stale = failure(vec![], &[("a.rs", "f")]).expect("a stale entry fails");
    assert!(
        stale.contains("remove them from the allowlist in here.rs"),
        "{stale}"
    );
    assert!(stale.contains(r#"("a.rs", "f"),"#), "{stale}");
    assert!(stale.contains(RULES_DOC), "{stale}");
}
