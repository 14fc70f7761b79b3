//! What a provider must change: a diff of the record sets it should hold against what
//! its zone holds, limited to the record sets this federation owns (pure, generic over
//! the provider's native record set).
//!
//! # Ownership
//!
//! A zone is shared with people and other tools, so a provider touches only record sets
//! it can prove are its own: every owned (name, type) has an ownership marker, a TXT
//! record set at [`Owner::marker_name`] holding [`Owner::marker_value`]:
//!
//! ```text
//! shop.example.com.              A    192.0.2.1
//! _fedingress-a.shop.example.com. TXT "heritage=fedingress,fedingress/owner=hub-1,fedingress/resource=shop/web"
//! ```
//!
//! The marker has a name of its own per (name, type) because a CNAME cannot share its
//! name with a TXT record (ExternalDNS's TXT registry learnt it the hard way), and so
//! that the A and AAAA of one name are claimed separately. A wildcard's marker is
//! `_fedingress-<type>-wildcard.<parent>` (a `*` label must stay leftmost).
//!
//! # The diff
//!
//! [`diff`] compares, per (name, type), the desired native record sets ([`Wanted`]) with
//! the current ones ([`conflicting`] tells the conflicts alone, before a provider sets
//! up what the record sets it writes need):
//!
//! - unclaimed and empty: the record sets are created, with their marker;
//! - claimed by this federation: record sets are created, updated (same name, type and
//!   set identifier, other contents) or deleted to match; the marker is kept current
//!   (a new owner_ref within this federation takes the name over);
//! - anything else is a [`Conflict`], never touched: record sets without a marker
//!   (someone else's), a marker of another federation, a TXT record set at the marker
//!   name that is no marker, or a CNAME sharing its name with someone else's records;
//! - a (name, type) this federation claims that is no longer desired is deleted, its
//!   marker last.
//!
//! Results are grouped per DNS name (the ingress's `dnsName`, or a delegated apex), the
//! unit of status: every desired DNS name has a [`NamePlan`], even when in sync.
//!
//! # Batches and order
//!
//! [`batches`] keeps each DNS name's changes together, so that a provider applying a
//! batch atomically (a Route53 ChangeBatch, a Cloud DNS change) changes a name all at
//! once. Within a name, changes come in the order that is safe should a name be split
//! over several batches (more changes than a batch holds) and one of them fail: markers
//! created or updated first (a record set never exists unclaimed), then deletes (a CNAME
//! replacing A records, a policy change), updates, creates, and markers deleted last.
//!
//! Applying a plan and diffing again gives an empty plan (tested), so a sync is
//! idempotent and a periodic resync repairs drift by hand.
//!
//! # Assumptions
//!
//! Native record sets are normalised by the provider: names fully qualified, lower case,
//! without the trailing dot; types upper case; and a record set read back from the zone
//! compares equal ([`PartialEq`]) to the one it was created from.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::Owner;

/// The first label of every ownership marker starts with it.
pub const MARKER_PREFIX: &str = "_fedingress-";

/// TTL of the ownership markers (nobody resolves them in a hurry).
pub const MARKER_TTL: u32 = 300;

/// The `heritage` every marker of this product carries.
const HERITAGE: &str = "heritage=fedingress";

/// A provider's record set as this module needs to see it.
pub trait NativeRecordSet: Clone + PartialEq + fmt::Debug {
    /// Fully qualified, lower case, without the trailing dot.
    fn name(&self) -> &str;
    /// Upper case: `A`, `AAAA`, `CNAME`, `TXT`, `NS`, `MX`, …
    fn type_(&self) -> &str;
    /// What tells record sets of one (name, type) apart (a Route53 set identifier);
    /// `None` where there is one record set per (name, type).
    fn set_identifier(&self) -> Option<&str> {
        None
    }
    /// A TXT record set's strings in presentation form (each `"…"`, possibly several
    /// quoted strings); empty for other types.
    fn txt_values(&self) -> Vec<String>;
    /// A TXT record set at `name` holding the one presentation-form `value`, with
    /// [`MARKER_TTL`].
    fn marker(name: &str, value: &str) -> Self;
}

/// What identifies a native record set in a zone.
type Key = (String, String, Option<String>);

fn key<N: NativeRecordSet>(record: &N) -> Key {
    (
        record.name().to_owned(),
        record.type_().to_owned(),
        record.set_identifier().map(str::to_owned),
    )
}

/// Who a marker says owns a (name, type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    /// The federation's id ([`Owner::id`]).
    pub owner: String,
    /// The `owner_ref` of the [`PolicyRecordSet`](super::PolicyRecordSet) it was
    /// published for.
    pub resource: String,
}

/// What the zone says about one (name, type)'s ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This federation's marker.
    Ours { resource: String },
    /// Another federation's marker (or one that names several owners).
    Other(Ownership),
    /// A TXT record set at the marker name that is no fedingress marker.
    Foreign,
}

impl Owner {
    pub fn new(id: impl Into<String>) -> Self {
        Owner { id: id.into() }
    }

    /// The marker's name for (`name`, `type_`): `_fedingress-<type>.<name>`, lower case;
    /// for a wildcard `*.<parent>`, `_fedingress-<type>-wildcard.<parent>`.
    pub fn marker_name(name: &str, type_: &str) -> String {
        let type_ = type_.to_ascii_lowercase();
        match name.strip_prefix("*.") {
            Some(parent) => format!("{MARKER_PREFIX}{type_}-wildcard.{parent}"),
            None if name == "*" => format!("{MARKER_PREFIX}{type_}-wildcard"),
            None => format!("{MARKER_PREFIX}{type_}.{name}"),
        }
    }

    /// The (name, TYPE) whose marker `marker` is, or `None` when it is not a marker name.
    pub fn parse_marker_name(marker: &str) -> Option<(String, String)> {
        let (first, rest) = match marker.split_once('.') {
            Some((first, rest)) => (first, Some(rest)),
            None => (marker, None),
        };
        let tag = first.strip_prefix(MARKER_PREFIX)?;
        let (type_, wildcard) = match tag.strip_suffix("-wildcard") {
            Some(type_) => (type_, true),
            None => (tag, false),
        };
        if type_.is_empty() || !type_.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let name = match (wildcard, rest) {
            (true, Some(rest)) => format!("*.{rest}"),
            (true, None) => "*".to_owned(),
            (false, Some(rest)) => rest.to_owned(),
            (false, None) => return None,
        };
        Some((name, type_.to_ascii_uppercase()))
    }

    /// The marker's TXT data in presentation form:
    /// `"heritage=fedingress,fedingress/owner=<id>,fedingress/resource=<owner_ref>"`,
    /// split into several quoted strings when longer than a TXT string's 255 bytes.
    pub fn marker_value(&self, owner_ref: &str) -> String {
        let text = format!(
            "{HERITAGE},fedingress/owner={},fedingress/resource={owner_ref}",
            self.id
        );
        let mut out = String::new();
        let mut chunk = String::new();
        for c in text.chars() {
            if chunk.len() + c.len_utf8() > 255 {
                push_quoted(&mut out, &chunk);
                chunk.clear();
            }
            chunk.push(c);
        }
        push_quoted(&mut out, &chunk);
        out
    }

    /// The ownership a marker's TXT data (presentation form, quoted or not) states, or
    /// `None` when it is no fedingress marker.
    pub fn parse_marker_value(value: &str) -> Option<Ownership> {
        let text = unquote(value);
        let mut fields = text.split(',');
        if fields.next()? != HERITAGE {
            return None;
        }
        let mut owner = None;
        let mut resource = None;
        for field in fields {
            if let Some(v) = field.strip_prefix("fedingress/owner=") {
                owner = Some(v.to_owned());
            } else if let Some(v) = field.strip_prefix("fedingress/resource=") {
                resource = Some(v.to_owned());
            }
        }
        Some(Ownership {
            owner: owner?,
            resource: resource.unwrap_or_default(),
        })
    }

    /// The claim of every (name, TYPE) that has a TXT record set at its marker name in
    /// `current`.
    pub fn claims<N: NativeRecordSet>(&self, current: &[N]) -> BTreeMap<(String, String), Claim> {
        let mut out = BTreeMap::new();
        for record in current.iter().filter(|r| r.type_() == "TXT") {
            let Some(claimed) = Owner::parse_marker_name(record.name()) else {
                continue;
            };
            out.insert(claimed, self.claim_of(&record.txt_values()));
        }
        out
    }

    fn claim_of(&self, values: &[String]) -> Claim {
        let parsed: Vec<Ownership> = values
            .iter()
            .filter_map(|v| Owner::parse_marker_value(v))
            .collect();
        if parsed.is_empty() || parsed.len() != values.len() {
            return Claim::Foreign;
        }
        match parsed.iter().find(|o| o.owner != self.id) {
            Some(other) => Claim::Other(other.clone()),
            None => Claim::Ours {
                resource: parsed[0].resource.clone(),
            },
        }
    }
}

fn push_quoted(out: &mut String, text: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The text of TXT presentation data: its quoted strings concatenated (escapes
/// undone), or the data itself when it has no quotes.
fn unquote(value: &str) -> String {
    let value = value.trim();
    if !value.starts_with('"') {
        return value.to_owned();
    }
    let mut out = String::new();
    let mut inside = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, inside) {
            ('"', _) => inside = !inside,
            ('\\', true) => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            (c, true) => out.push(c),
            (_, false) => {}
        }
    }
    out
}

/// One desired native record set and what it was derived from.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted<N> {
    pub record: N,
    /// The [`PolicyRecordSet::owner_ref`](super::PolicyRecordSet::owner_ref), written
    /// into the marker.
    pub owner_ref: String,
    /// The DNS name whose status it reports to.
    pub dns_name: String,
}

impl<N> Wanted<N> {
    /// `record`, derived from `from`.
    pub fn new(record: N, from: &super::PolicyRecordSet) -> Self {
        Wanted {
            record,
            owner_ref: from.owner_ref.clone(),
            dns_name: from.dns_name.clone(),
        }
    }
}

/// A (name, type) this federation may not touch, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub name: String,
    pub type_: String,
    /// The other federation's id, when a marker names one.
    pub other_owner: Option<String>,
    /// For people: which record set, who holds it, what was done.
    pub message: String,
}

/// One change to a zone.
#[derive(Clone, Debug, PartialEq)]
pub enum Change<N> {
    Create(N),
    /// Same name, type and set identifier, other contents.
    Update {
        old: N,
        new: N,
    },
    Delete(N),
}

impl<N: NativeRecordSet> Change<N> {
    /// The record set as it is after the change (before it, for a delete).
    pub fn record(&self) -> &N {
        match self {
            Change::Create(n) | Change::Delete(n) | Change::Update { new: n, .. } => n,
        }
    }
}

/// What changes for one DNS name.
#[derive(Clone, Debug, PartialEq)]
pub struct NamePlan<N> {
    pub creates: Vec<N>,
    pub updates: Vec<(N, N)>,
    pub deletes: Vec<N>,
    pub conflicts: Vec<Conflict>,
}

impl<N> Default for NamePlan<N> {
    fn default() -> Self {
        NamePlan {
            creates: Vec::new(),
            updates: Vec::new(),
            deletes: Vec::new(),
            conflicts: Vec::new(),
        }
    }
}

fn is_marker<N: NativeRecordSet>(record: &N) -> bool {
    record.type_() == "TXT" && Owner::parse_marker_name(record.name()).is_some()
}

impl<N: NativeRecordSet> NamePlan<N> {
    /// Number of changes.
    pub fn len(&self) -> usize {
        self.creates.len() + self.updates.len() + self.deletes.len()
    }

    /// Nothing to change (conflicts aside).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The changes in their safe order (see the module doc): markers created or
    /// updated, deletes, updates, creates, markers deleted.
    pub fn changes(&self) -> Vec<Change<N>> {
        let mut out = Vec::with_capacity(self.len());
        let claim_creates = self.creates.iter().filter(|r| is_marker(*r));
        let claim_updates = self.updates.iter().filter(|(_, new)| is_marker(new));
        out.extend(claim_creates.cloned().map(Change::Create));
        out.extend(
            claim_updates
                .cloned()
                .map(|(old, new)| Change::Update { old, new }),
        );
        let deletes = self.deletes.iter().filter(|r| !is_marker(*r));
        out.extend(deletes.cloned().map(Change::Delete));
        let updates = self.updates.iter().filter(|(_, new)| !is_marker(new));
        out.extend(
            updates
                .cloned()
                .map(|(old, new)| Change::Update { old, new }),
        );
        let creates = self.creates.iter().filter(|r| !is_marker(*r));
        out.extend(creates.cloned().map(Change::Create));
        let releases = self.deletes.iter().filter(|r| is_marker(*r));
        out.extend(releases.cloned().map(Change::Delete));
        out
    }
}

/// The changes per DNS name.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<N> {
    /// Every desired DNS name (in sync ones with an empty plan), and the DNS names of
    /// owned record sets being deleted.
    pub names: BTreeMap<String, NamePlan<N>>,
}

impl<N> Default for Plan<N> {
    fn default() -> Self {
        Plan {
            names: BTreeMap::new(),
        }
    }
}

impl<N: NativeRecordSet> Plan<N> {
    /// Number of changes over all names.
    pub fn len(&self) -> usize {
        self.names.values().map(NamePlan::len).sum()
    }

    /// Nothing to change (conflicts aside).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every conflict.
    pub fn conflicts(&self) -> impl Iterator<Item = &Conflict> {
        self.names.values().flat_map(|n| n.conflicts.iter())
    }

    /// What the zone holds once every change is applied to `current` (a dry run's
    /// "would hold").
    pub fn apply(&self, current: &[N]) -> Vec<N> {
        let changes: Vec<Change<N>> = self.names.values().flat_map(NamePlan::changes).collect();
        apply(current, &changes)
    }
}

/// `current` with `changes` applied in order (a create or update replaces a record set
/// with the same name, type and set identifier; a delete removes it).
pub fn apply<N: NativeRecordSet>(current: &[N], changes: &[Change<N>]) -> Vec<N> {
    let mut out: BTreeMap<Key, N> = current.iter().map(|r| (key(r), r.clone())).collect();
    for change in changes {
        match change {
            Change::Create(r) => {
                out.insert(key(r), r.clone());
            }
            Change::Update { old, new } => {
                out.remove(&key(old));
                out.insert(key(new), new.clone());
            }
            Change::Delete(r) => {
                out.remove(&key(r));
            }
        }
    }
    out.into_values().collect()
}

/// The zone as [`diff`] reads it: who claims each (name, type), and the record sets by
/// key, by (name, type) and the types at each name.
struct Zone<'a, N> {
    claims: BTreeMap<(String, String), Claim>,
    by_key: BTreeMap<Key, &'a N>,
    by_name_type: BTreeMap<(String, String), Vec<&'a N>>,
    by_name: BTreeMap<&'a str, BTreeSet<String>>,
}

impl<'a, N: NativeRecordSet> Zone<'a, N> {
    fn new(current: &'a [N], owner: &Owner) -> Self {
        let mut zone = Zone {
            claims: owner.claims(current),
            by_key: BTreeMap::new(),
            by_name_type: BTreeMap::new(),
            by_name: BTreeMap::new(),
        };
        for record in current {
            zone.by_key.insert(key(record), record);
            zone.by_name_type
                .entry((record.name().to_owned(), record.type_().to_owned()))
                .or_default()
                .push(record);
            zone.by_name
                .entry(record.name())
                .or_default()
                .insert(record.type_().to_owned());
        }
        zone
    }

    /// The record sets of (`name`, `type_`).
    fn existing(&self, name: &str, type_: &str) -> &[&'a N] {
        self.by_name_type
            .get(&(name.to_owned(), type_.to_owned()))
            .map_or(&[][..], Vec::as_slice)
    }

    /// Why `owner` may not write (`name`, `type_`), if it may not: the other federation
    /// named by a marker, and the words (see the module doc).
    fn conflict(&self, name: &str, type_: &str, owner: &Owner) -> Option<(Option<String>, String)> {
        let ours = |claim: Option<&Claim>| matches!(claim, Some(Claim::Ours { .. }));
        let claim = self.claims.get(&(name.to_owned(), type_.to_owned()));
        let marker = Owner::marker_name(name, type_);
        match claim {
            Some(Claim::Other(other)) => Some((
                Some(other.owner.clone()),
                format!(
                    "{name} {type_} belongs to another fedingress federation, \"{}\" (resource {}; marker TXT at {marker}): left untouched",
                    other.owner, other.resource
                ),
            )),
            Some(Claim::Foreign) => Some((
                None,
                format!(
                    "{name} {type_}: {marker} holds a TXT record set that is not a fedingress ownership marker, so {name} {type_} cannot be claimed: left untouched"
                ),
            )),
            None if !self.existing(name, type_).is_empty() => Some((
                None,
                format!(
                    "{name} {type_} exists without this federation's ownership marker (TXT at {marker}): it was not published by \"{}\", so it is left untouched; delete it to let fedingress publish {name}",
                    owner.id
                ),
            )),
            _ => {
                // A CNAME cannot share its name with another type: someone else's records
                // at the name block it, and a foreign CNAME blocks everything else.
                let blocking: Vec<&String> = self
                    .by_name
                    .get(name)
                    .into_iter()
                    .flatten()
                    .filter(|other| *other != type_)
                    .filter(|other| type_ == "CNAME" || *other == "CNAME")
                    .filter(|other| !ours(self.claims.get(&(name.to_owned(), (*other).clone()))))
                    .collect();
                (!blocking.is_empty()).then(|| {
                    (
                        None,
                        format!(
                            "{name} {type_} cannot be published: {name} also holds {} not published by \"{}\" (a CNAME cannot share its name with other records): left untouched",
                            blocking
                                .iter()
                                .map(|t| t.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            owner.id
                        ),
                    )
                })
            }
        }
    }
}

/// The (name, type)s among `wanted` that `owner` may not write in `current`: exactly
/// those [`diff`] reports as a [`Conflict`], known before anything is planned, so that a
/// provider sets up only what the record sets it will write need (Route53's health
/// checks, which are billed).
pub fn conflicting<'w, N: NativeRecordSet>(
    wanted: impl IntoIterator<Item = (&'w str, &'w str)>,
    current: &[N],
    owner: &Owner,
) -> BTreeSet<(String, String)> {
    let zone = Zone::new(current, owner);
    wanted
        .into_iter()
        .filter(|(name, type_)| zone.conflict(name, type_, owner).is_some())
        .map(|(name, type_)| (name.to_owned(), type_.to_owned()))
        .collect()
}

/// The changes that bring `current` (the provider's zone, everything in it) to
/// `desired`, touching only what `owner` owns. See the module doc.
pub fn diff<N: NativeRecordSet>(desired: &[Wanted<N>], current: &[N], owner: &Owner) -> Plan<N> {
    let zone = Zone::new(current, owner);
    let mut groups: BTreeMap<(String, String), Vec<&Wanted<N>>> = BTreeMap::new();
    for wanted in desired {
        groups
            .entry((
                wanted.record.name().to_owned(),
                wanted.record.type_().to_owned(),
            ))
            .or_default()
            .push(wanted);
    }
    let mut plan = Plan::default();
    for ((name, type_), wanted) in &groups {
        let first = wanted[0];
        let entry = plan.names.entry(first.dns_name.clone()).or_default();
        let existing = zone.existing(name, type_);
        let marker = Owner::marker_name(name, type_);
        let conflict = zone.conflict(name, type_, owner);
        if let Some((other_owner, message)) = conflict {
            entry.conflicts.push(Conflict {
                name: name.clone(),
                type_: type_.clone(),
                other_owner,
                message,
            });
            continue;
        }
        // The marker first, then the record sets.
        let want_marker = N::marker(&marker, &owner.marker_value(&first.owner_ref));
        match zone.by_key.get(&key(&want_marker)) {
            None => entry.creates.push(want_marker),
            Some(current) if **current != want_marker => {
                entry.updates.push(((*current).clone(), want_marker));
            }
            Some(_) => {}
        }
        let mut kept: BTreeSet<Key> = BTreeSet::new();
        for w in wanted {
            let k = key(&w.record);
            if !kept.insert(k.clone()) {
                continue;
            }
            match zone.by_key.get(&k) {
                None => entry.creates.push(w.record.clone()),
                Some(current) if **current != w.record => {
                    entry.updates.push(((*current).clone(), w.record.clone()));
                }
                Some(_) => {}
            }
        }
        for record in existing {
            if !kept.contains(&key(*record)) {
                entry.deletes.push((*record).clone());
            }
        }
    }
    // Owned (name, type)s no longer desired: their record sets, then their markers.
    for ((name, type_), claim) in &zone.claims {
        let Claim::Ours { resource } = claim else {
            continue;
        };
        let group_key = (name.clone(), type_.clone());
        if groups.contains_key(&group_key) {
            continue;
        }
        let dns_name = resource
            .strip_prefix("zone/")
            .map_or_else(|| name.clone(), str::to_owned);
        let entry = plan.names.entry(dns_name).or_default();
        for record in zone.existing(name, type_) {
            entry.deletes.push((*record).clone());
        }
        let marker = Owner::marker_name(name, type_);
        for record in zone.existing(&marker, "TXT") {
            entry.deletes.push((*record).clone());
        }
    }
    plan
}

/// A set of changes a provider applies as one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<N> {
    /// The DNS names whose changes are (all, or part, when split) in this batch.
    pub names: Vec<String>,
    pub changes: Vec<Change<N>>,
}

/// `plan`'s changes in batches of at most `batch_size` changes (at least 1), whole DNS
/// names per batch; a name with more changes than fit gets batches of its own, in its
/// safe order ([`NamePlan::changes`]). Names without changes are left out.
pub fn batches<N: NativeRecordSet>(plan: &Plan<N>, batch_size: usize) -> Vec<Batch<N>> {
    let size = batch_size.max(1);
    batches_by(plan, |changes| changes.len() <= size)
}

/// [`batches`] with the provider's own measure of a request: `fits` says whether a
/// request of these changes is acceptable (e.g. Route53 counts values and characters,
/// not changes). A single change always fits, so that every change is sent.
pub fn batches_by<N: NativeRecordSet>(
    plan: &Plan<N>,
    fits: impl Fn(&[Change<N>]) -> bool,
) -> Vec<Batch<N>> {
    let fits = |changes: &[Change<N>]| changes.len() <= 1 || fits(changes);
    let mut out = Vec::new();
    let mut current = Batch {
        names: Vec::new(),
        changes: Vec::new(),
    };
    for (name, name_plan) in &plan.names {
        let changes = name_plan.changes();
        if changes.is_empty() {
            continue;
        }
        if !current.changes.is_empty() {
            // Joined to the batch being filled, if the whole name still fits.
            let before = current.changes.len();
            current.changes.extend(changes.iter().cloned());
            if fits(&current.changes) {
                current.names.push(name.clone());
                continue;
            }
            current.changes.truncate(before);
            out.push(std::mem::replace(
                &mut current,
                Batch {
                    names: Vec::new(),
                    changes: Vec::new(),
                },
            ));
        }
        if !fits(&changes) {
            // Too big alone: batches of its own, in its safe order.
            let mut part: Vec<Change<N>> = Vec::new();
            for change in changes {
                part.push(change);
                if !fits(&part) {
                    let last = part.pop().expect("just pushed");
                    out.push(Batch {
                        names: vec![name.clone()],
                        changes: std::mem::replace(&mut part, vec![last]),
                    });
                }
            }
            out.push(Batch {
                names: vec![name.clone()],
                changes: part,
            });
            continue;
        }
        current.names.push(name.clone());
        current.changes.extend(changes);
    }
    if !current.changes.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record set as a test zone holds it.
    #[derive(Clone, Debug, PartialEq)]
    struct Rec {
        name: String,
        type_: String,
        id: Option<String>,
        values: Vec<String>,
    }

    impl NativeRecordSet for Rec {
        fn name(&self) -> &str {
            &self.name
        }
        fn type_(&self) -> &str {
            &self.type_
        }
        fn set_identifier(&self) -> Option<&str> {
            self.id.as_deref()
        }
        fn txt_values(&self) -> Vec<String> {
            if self.type_ == "TXT" {
                self.values.clone()
            } else {
                Vec::new()
            }
        }
        fn marker(name: &str, value: &str) -> Self {
            rec(name, "TXT", None, &[value])
        }
    }

    fn rec(name: &str, type_: &str, id: Option<&str>, values: &[&str]) -> Rec {
        Rec {
            name: name.to_owned(),
            type_: type_.to_owned(),
            id: id.map(str::to_owned),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn want(record: Rec, owner_ref: &str, dns_name: &str) -> Wanted<Rec> {
        Wanted {
            record,
            owner_ref: owner_ref.to_owned(),
            dns_name: dns_name.to_owned(),
        }
    }

    fn hub() -> Owner {
        Owner::new("hub-1")
    }

    fn marker(owner: &Owner, name: &str, type_: &str, resource: &str) -> Rec {
        Rec::marker(
            &Owner::marker_name(name, type_),
            &owner.marker_value(resource),
        )
    }

    const SHOP: &str = "shop.example.com";

    fn weighted(id: &str, ip: &str) -> Rec {
        rec(SHOP, "A", Some(id), &[ip])
    }

    /// Applies `plan` batch by batch and checks that a second diff has nothing to do.
    fn converge(desired: &[Wanted<Rec>], current: &[Rec], batch_size: usize) -> Vec<Rec> {
        let plan = diff(desired, current, &hub());
        let mut state = current.to_vec();
        for batch in batches(&plan, batch_size) {
            assert!(batch.changes.len() <= batch_size.max(1));
            state = apply(&state, &batch.changes);
        }
        assert_eq!(state, plan.apply(current));
        let again = diff(desired, &state, &hub());
        assert!(again.is_empty(), "second plan not empty: {again:#?}");
        state
    }

    #[test]
    fn marker_names_round_trip_and_are_wildcard_safe() {
        assert_eq!(
            Owner::marker_name(SHOP, "A"),
            "_fedingress-a.shop.example.com"
        );
        assert_eq!(
            Owner::marker_name("*.shop.example.com", "CNAME"),
            "_fedingress-cname-wildcard.shop.example.com"
        );
        for (name, type_) in [
            (SHOP, "AAAA"),
            ("*.shop.example.com", "A"),
            ("example.com", "NS"),
        ] {
            assert_eq!(
                Owner::parse_marker_name(&Owner::marker_name(name, type_)),
                Some((name.to_owned(), type_.to_owned()))
            );
        }
        assert_eq!(Owner::parse_marker_name(SHOP), None);
        assert_eq!(Owner::parse_marker_name("_fedingress-.x"), None);
        assert_eq!(Owner::parse_marker_name("_fedingress-a"), None);
    }

    #[test]
    fn marker_values_round_trip_even_when_long() {
        let owner = hub();
        let value = owner.marker_value("shop/web");
        assert_eq!(
            value,
            "\"heritage=fedingress,fedingress/owner=hub-1,fedingress/resource=shop/web\""
        );
        let long = format!("ns/{}", "x".repeat(300));
        let split = owner.marker_value(&long);
        assert!(split.contains("\" \""), "{split}");
        assert_eq!(
            Owner::parse_marker_value(&split),
            Some(Ownership {
                owner: "hub-1".to_owned(),
                resource: long
            })
        );
        assert_eq!(Owner::parse_marker_value("\"v=spf1 -all\""), None);
    }

    #[test]
    fn claims_tell_ours_others_and_foreign_apart() {
        let other = Owner::new("hub-2");
        let current = vec![
            marker(&hub(), SHOP, "A", "shop/web"),
            marker(&other, SHOP, "AAAA", "x/y"),
            rec(
                "_fedingress-cname.shop.example.com",
                "TXT",
                None,
                &["\"hello\""],
            ),
            rec("_dmarc.shop.example.com", "TXT", None, &["\"v=DMARC1\""]),
        ];
        let claims = hub().claims(&current);
        assert_eq!(claims.len(), 3);
        assert_eq!(
            claims[&(SHOP.to_owned(), "A".to_owned())],
            Claim::Ours {
                resource: "shop/web".to_owned()
            }
        );
        assert!(matches!(
            &claims[&(SHOP.to_owned(), "AAAA".to_owned())],
            Claim::Other(o) if o.owner == "hub-2"
        ));
        assert_eq!(
            claims[&(SHOP.to_owned(), "CNAME".to_owned())],
            Claim::Foreign
        );
    }

    #[test]
    fn creates_with_marker_first_and_is_idempotent() {
        let desired = vec![
            want(weighted("eu", "192.0.2.1"), "shop/web", SHOP),
            want(weighted("us", "198.51.100.1"), "shop/web", SHOP),
        ];
        let plan = diff(&desired, &[], &hub());
        let changes = plan.names[SHOP].changes();
        assert_eq!(changes.len(), 3);
        assert_eq!(
            changes[0],
            Change::Create(marker(&hub(), SHOP, "A", "shop/web"))
        );
        let state = converge(&desired, &[], 1000);
        assert_eq!(state.len(), 3);
    }

    #[test]
    fn updates_and_deletes_only_what_it_owns() {
        let foreign = rec("www.example.com", "A", None, &["203.0.113.1"]);
        let mx = rec(SHOP, "MX", None, &["10 mail.example.com."]);
        let current = vec![
            marker(&hub(), SHOP, "A", "shop/web"),
            weighted("eu", "192.0.2.1"),
            weighted("us", "198.51.100.1"),
            foreign.clone(),
            mx.clone(),
        ];
        let desired = vec![want(weighted("eu", "192.0.2.99"), "shop/web", SHOP)];
        let plan = diff(&desired, &current, &hub());
        let name = &plan.names[SHOP];
        assert_eq!(
            name.updates,
            vec![(weighted("eu", "192.0.2.1"), weighted("eu", "192.0.2.99"))]
        );
        assert_eq!(name.deletes, vec![weighted("us", "198.51.100.1")]);
        assert!(name.creates.is_empty() && name.conflicts.is_empty());
        let state = converge(&desired, &current, 1000);
        assert!(state.contains(&foreign) && state.contains(&mx));
    }

    #[test]
    fn no_longer_desired_is_deleted_with_its_marker_last() {
        let current = vec![
            marker(&hub(), SHOP, "A", "shop/web"),
            weighted("eu", "192.0.2.1"),
            marker(&hub(), "ns1.gslb.example.com", "A", "zone/gslb.example.com"),
            rec("ns1.gslb.example.com", "A", None, &["192.0.2.53"]),
        ];
        let plan = diff(&[], &current, &hub());
        let changes = plan.names[SHOP].changes();
        assert_eq!(
            changes,
            vec![
                Change::Delete(weighted("eu", "192.0.2.1")),
                Change::Delete(marker(&hub(), SHOP, "A", "shop/web")),
            ]
        );
        // Delegation records report to the delegated apex.
        assert_eq!(plan.names["gslb.example.com"].deletes.len(), 2);
        assert!(converge(&[], &current, 1000).is_empty());
    }

    #[test]
    fn conflicting_names_exactly_the_conflicts_of_the_diff() {
        let other = Owner::new("hub-2");
        let web = "web.example.com";
        let zone = vec![
            // Someone else's A at shop; another federation's AAAA claim at shop.
            rec(SHOP, "A", None, &["203.0.113.1"]),
            marker(&other, SHOP, "AAAA", "team/app"),
            // Ours at web; a foreign CNAME at lb, blocking any other type there.
            marker(&hub(), web, "A", "shop/web"),
            rec(web, "A", None, &["192.0.2.9"]),
            rec("lb.example.com", "CNAME", None, &["elb.example.net."]),
        ];
        let desired = vec![
            want(rec(SHOP, "A", None, &["192.0.2.1"]), "shop/web", SHOP),
            want(rec(SHOP, "AAAA", None, &["2001:db8::1"]), "shop/web", SHOP),
            want(rec(SHOP, "TXT", None, &["\"hello\""]), "shop/web", SHOP),
            want(rec(web, "A", None, &["192.0.2.1"]), "shop/web", web),
            want(
                rec("lb.example.com", "A", None, &["192.0.2.1"]),
                "lb/web",
                "lb.example.com",
            ),
        ];
        let from_diff: BTreeSet<(String, String)> = diff(&desired, &zone, &hub())
            .conflicts()
            .map(|c| (c.name.clone(), c.type_.clone()))
            .collect();
        let keys = desired
            .iter()
            .map(|w| (w.record.name.as_str(), w.record.type_.as_str()));
        let known_before = conflicting(keys, &zone, &hub());
        assert_eq!(known_before, from_diff);
        let expected: BTreeSet<(String, String)> =
            [(SHOP, "A"), (SHOP, "AAAA"), ("lb.example.com", "A")]
                .iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect();
        assert_eq!(known_before, expected);
    }

    #[test]
    fn foreign_record_sets_are_conflicts_never_touched() {
        let other = Owner::new("hub-2");
        let theirs = vec![rec(SHOP, "A", None, &["203.0.113.1"])];
        let desired = vec![want(rec(SHOP, "A", None, &["192.0.2.1"]), "shop/web", SHOP)];
        let plan = diff(&desired, &theirs, &hub());
        assert!(plan.is_empty());
        let conflict = &plan.names[SHOP].conflicts[0];
        assert_eq!(
            (conflict.name.as_str(), conflict.type_.as_str()),
            (SHOP, "A")
        );
        assert!(
            conflict
                .message
                .contains("without this federation's ownership marker")
        );
        assert!(conflict.message.contains("_fedingress-a.shop.example.com"));

        // Another federation's marker, even with no record set yet.
        let claimed = vec![marker(&other, SHOP, "A", "team/app")];
        let plan = diff(&desired, &claimed, &hub());
        assert!(plan.is_empty());
        let conflict = &plan.names[SHOP].conflicts[0];
        assert_eq!(conflict.other_owner.as_deref(), Some("hub-2"));
        assert!(
            conflict.message.contains("\"hub-2\""),
            "{}",
            conflict.message
        );
        assert!(conflict.message.contains("team/app"));

        // Another federation's records are never deleted as "no longer desired".
        let mut both = claimed.clone();
        both.push(rec(SHOP, "A", None, &["203.0.113.1"]));
        assert!(diff(&[], &both, &hub()).is_empty());

        // A TXT at the marker name that is no marker.
        let squatted = vec![rec(
            "_fedingress-a.shop.example.com",
            "TXT",
            None,
            &["\"x\""],
        )];
        let plan = diff(&desired, &squatted, &hub());
        assert!(plan.is_empty());
        assert!(
            plan.names[SHOP].conflicts[0]
                .message
                .contains("not a fedingress ownership marker")
        );
    }

    #[test]
    fn cname_is_blocked_by_foreign_records_at_its_name_but_replaces_our_own() {
        let desired = vec![want(
            rec(SHOP, "CNAME", None, &["lb.example.net."]),
            "shop/web",
            SHOP,
        )];
        let foreign = vec![rec(SHOP, "TXT", None, &["\"verification\""])];
        let plan = diff(&desired, &foreign, &hub());
        assert!(plan.is_empty());
        assert!(plan.names[SHOP].conflicts[0].message.contains("TXT"));

        let ours = vec![
            marker(&hub(), SHOP, "A", "shop/web"),
            rec(SHOP, "A", None, &["192.0.2.1"]),
        ];
        let plan = diff(&desired, &ours, &hub());
        let changes = plan.names[SHOP].changes();
        // Claim the CNAME, delete the A, create the CNAME, release the A's marker.
        assert_eq!(changes.len(), 4);
        assert!(matches!(&changes[0], Change::Create(m) if m.type_ == "TXT"));
        assert_eq!(
            changes[1],
            Change::Delete(rec(SHOP, "A", None, &["192.0.2.1"]))
        );
        assert!(matches!(&changes[2], Change::Create(m) if m.type_ == "CNAME"));
        assert!(matches!(&changes[3], Change::Delete(m) if m.type_ == "TXT"));
        let state = converge(&desired, &ours, 1);
        assert_eq!(state.len(), 2);
    }

    #[test]
    fn a_new_owner_ref_takes_the_name_over_by_updating_the_marker() {
        let current = vec![
            marker(&hub(), SHOP, "A", "old/web"),
            rec(SHOP, "A", None, &["192.0.2.1"]),
        ];
        let desired = vec![want(rec(SHOP, "A", None, &["192.0.2.1"]), "new/web", SHOP)];
        let plan = diff(&desired, &current, &hub());
        assert_eq!(plan.len(), 1);
        assert_eq!(
            plan.names[SHOP].updates[0].1,
            marker(&hub(), SHOP, "A", "new/web")
        );
        converge(&desired, &current, 10);
    }

    #[test]
    fn in_sync_names_have_an_empty_plan_entry() {
        let desired = vec![want(rec(SHOP, "A", None, &["192.0.2.1"]), "shop/web", SHOP)];
        let state = converge(&desired, &[], 10);
        let plan = diff(&desired, &state, &hub());
        assert!(plan.names[SHOP].is_empty() && plan.names[SHOP].conflicts.is_empty());
        assert!(batches(&plan, 10).is_empty());
    }

    #[test]
    fn batches_keep_names_whole_and_split_big_names_in_safe_order() {
        let names = ["a.example.com", "b.example.com", "c.example.com"];
        let mut desired = Vec::new();
        for (i, name) in names.iter().enumerate() {
            for k in 0..=i {
                let ip = format!("192.0.2.{k}");
                desired.push(want(
                    rec(name, "A", Some(&format!("c{k}")), &[&ip]),
                    "ns/x",
                    name,
                ));
            }
        }
        // a: 2 changes, b: 3, c: 4 (marker + record sets).
        let plan = diff(&desired, &[], &hub());
        let sizes: Vec<(Vec<String>, usize)> = batches(&plan, 5)
            .into_iter()
            .map(|b| (b.names, b.changes.len()))
            .collect();
        assert_eq!(
            sizes,
            vec![
                (
                    vec!["a.example.com".to_owned(), "b.example.com".to_owned()],
                    5
                ),
                (vec!["c.example.com".to_owned()], 4),
            ]
        );
        let split = batches(&plan, 3);
        let c: Vec<&Batch<Rec>> = split
            .iter()
            .filter(|b| b.names == ["c.example.com"])
            .collect();
        assert_eq!(c.len(), 2);
        assert!(matches!(&c[0].changes[0], Change::Create(m) if m.type_ == "TXT"));
        converge(&desired, &[], 3);
        converge(&desired, &[], 1);
        // And back to nothing, in batches of one: markers go last.
        let full = converge(&desired, &[], 100);
        let plan = diff(&[], &full, &hub());
        let order: Vec<Change<Rec>> = batches(&plan, 1)
            .into_iter()
            .filter(|b| b.names == ["c.example.com"])
            .flat_map(|b| b.changes)
            .collect();
        assert!(matches!(order.last(), Some(Change::Delete(m)) if m.type_ == "TXT"));
        assert!(converge(&[], &full, 1).is_empty());
    }

    #[test]
    fn duplicate_desired_keys_are_published_once() {
        let r = rec(SHOP, "A", None, &["192.0.2.1"]);
        let desired = vec![want(r.clone(), "shop/web", SHOP), want(r, "shop/web", SHOP)];
        assert_eq!(diff(&desired, &[], &hub()).len(), 2);
        converge(&desired, &[], 10);
    }
}
