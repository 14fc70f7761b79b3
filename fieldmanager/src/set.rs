//! `FieldSet`: a set of paths stored as a trie, as SMD's `fieldpath.Set`: `members` are
//! paths that end at this node, `children` hold the sets below an element. A path can be
//! both a member and have children (a map that is owned as a whole and whose entries are
//! owned too). Sets never keep empty children.

use crate::path::{Path, PathElement};
use std::collections::{BTreeMap, BTreeSet};

/// A set of field paths.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FieldSet {
    pub(crate) members: BTreeSet<PathElement>,
    pub(crate) children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Adds a path; the empty path is ignored (SMD's root is never a member).
    pub fn insert(&mut self, path: &Path) {
        self.insert_elements(&path.0);
    }

    pub(crate) fn insert_elements(&mut self, elements: &[PathElement]) {
        match elements {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self
                .children
                .entry(first.clone())
                .or_default()
                .insert_elements(rest),
        }
    }

    /// True when the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// True when `path` is a member (not merely a prefix of one).
    pub fn has(&self, path: &Path) -> bool {
        let mut node = self;
        let Some((last, prefix)) = path.0.split_last() else {
            return false;
        };
        for pe in prefix {
            match node.children.get(pe) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.members.contains(last)
    }

    /// The set below one element (`WithPrefix`), empty when there is none.
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe).filter(|c| !c.is_empty())
    }

    /// Every path in `self` or `other`.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out.normalized()
    }

    /// The paths of `self` that are not in `other` (exact paths: a member of `other`
    /// does not remove the paths below it, as SMD's `Difference`).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        FieldSet { members, children }
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        FieldSet { members, children }
    }

    /// Every path, in SMD's iteration order: this node's members (sorted), then each
    /// child's paths in element order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(Path(p));
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The set without empty children.
    pub(crate) fn normalized(mut self) -> FieldSet {
        self.children = std::mem::take(&mut self.children)
            .into_iter()
            .map(|(pe, c)| (pe, c.normalized()))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        self
    }

    /// Removes a top-level element and everything under it.
    pub(crate) fn without_top(&self, pe: &PathElement) -> FieldSet {
        let mut out = self.clone();
        out.members.remove(pe);
        out.children.remove(pe);
        out
    }

    /// Keeps only a top-level element and everything under it.
    pub(crate) fn only_top(&self, pe: &PathElement) -> FieldSet {
        let mut out = FieldSet::new();
        if self.members.contains(pe) {
            out.members.insert(pe.clone());
        }
        if let Some(child) = self.children.get(pe) {
            out.children.insert(pe.clone(), child.clone());
        }
        out.normalized()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&[&str]]) -> FieldSet {
        let mut s = FieldSet::new();
        for p in paths {
            s.insert(&Path::fields(p.iter().copied()));
        }
        s
    }

    #[test]
    fn set_operations_are_exact_on_paths() {
        let a = set(&[&["spec", "a"], &["spec", "b"], &["spec"]]);
        let b = set(&[&["spec", "b"], &["status"]]);
        assert_eq!(
            a.union(&b),
            set(&[&["spec", "a"], &["spec", "b"], &["spec"], &["status"]])
        );
        assert_eq!(a.difference(&b), set(&[&["spec", "a"], &["spec"]]));
        assert_eq!(a.intersection(&b), set(&[&["spec", "b"]]));
        // A member does not remove what is under it.
        assert_eq!(
            a.difference(&set(&[&["spec"]])),
            set(&[&["spec", "a"], &["spec", "b"]])
        );
        assert!(a.difference(&a).is_empty());
        assert!(a.has(&Path::fields(["spec", "a"])));
        assert!(!a.has(&Path::fields(["spec", "c"])));
    }

    #[test]
    fn paths_iterate_members_before_children() {
        let a = set(&[&["spec", "a"], &["b"], &["spec"]]);
        let printed: Vec<String> = a.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(printed, [".b", ".spec", ".spec.a"]);
    }
}
