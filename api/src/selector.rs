//! Label and field selectors, as in Kubernetes.
//!
//! - [`LabelSelectorRequirements`]: the string form used by `?labelSelector=` and
//!   `kubectl get -l` (`env=prod,tier in (gold,silver),!canary`), parsed with
//!   [`LabelSelectorRequirements::parse`] and evaluated with
//!   [`matches`](LabelSelectorRequirements::matches).
//! - [`LabelSelector`]: the API type (`matchLabels`, `matchExpressions`) used by
//!   `spec.placement.clusterSelector`, with [`validate`](LabelSelector::validate) and
//!   [`matches`](LabelSelector::matches).
//! - [`FieldSelector`]: the string form used by `?fieldSelector=`
//!   (`metadata.name=shop,metadata.namespace!=kube-system`). Which fields exist is the
//!   caller's business: check [`FieldSelector::fields`] against the supported ones and
//!   answer lookups in [`FieldSelector::matches`].

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::string_enum;
use crate::names;
use crate::validation::{FieldError, FieldPath};

/// A selector string that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse selector {selector:?}: {message}")]
pub struct SelectorError {
    /// The whole selector as given.
    pub selector: String,
    /// What is wrong, e.g. `expected '(' after 'in', found 'x'`.
    pub message: String,
}

// ---------------------------------------------------------------------------------------
// Label selector strings

/// The operator of one parsed label selector [`Requirement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequirementOperator {
    /// `key=value` or `key==value`: the label is present with this value.
    Equals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label is present with one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>5`: the label is present, an integer, and greater.
    GreaterThan,
    /// `key<5`: the label is present, an integer, and less.
    LessThan,
}

/// One term of a label selector, e.g. `tier in (gold,silver)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// How the label is compared.
    pub operator: RequirementOperator,
    /// The values compared against: one for `=`, `!=`, `>` and `<`; sorted and
    /// deduplicated for `in`/`notin`; none for existence tests.
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let contains = |v: &String| self.values.iter().any(|x| x == v);
        let compare = |ord: std::cmp::Ordering| {
            let (Some(value), Some(bound)) = (value, self.values.first()) else {
                return false;
            };
            match (value.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(value), Ok(bound)) => value.cmp(&bound) == ord,
                _ => false,
            }
        };
        match self.operator {
            RequirementOperator::Equals | RequirementOperator::In => value.is_some_and(contains),
            RequirementOperator::NotEquals | RequirementOperator::NotIn => {
                !value.is_some_and(contains)
            }
            RequirementOperator::Exists => value.is_some(),
            RequirementOperator::DoesNotExist => value.is_none(),
            RequirementOperator::GreaterThan => compare(std::cmp::Ordering::Greater),
            RequirementOperator::LessThan => compare(std::cmp::Ordering::Less),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map(String::as_str).unwrap_or("");
        match self.operator {
            RequirementOperator::Equals => write!(f, "{}={first}", self.key),
            RequirementOperator::NotEquals => write!(f, "{}!={first}", self.key),
            RequirementOperator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            RequirementOperator::NotIn => {
                write!(f, "{} notin ({})", self.key, self.values.join(","))
            }
            RequirementOperator::Exists => f.write_str(&self.key),
            RequirementOperator::DoesNotExist => write!(f, "!{}", self.key),
            RequirementOperator::GreaterThan => write!(f, "{}>{first}", self.key),
            RequirementOperator::LessThan => write!(f, "{}<{first}", self.key),
        }
    }
}

/// A parsed label selector string: all requirements must hold (logical AND). The empty
/// selector matches every object.
///
/// Syntax (whitespace between tokens is ignored): terms separated by `,`, each one of
/// `key=value`, `key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`,
/// `key`, `!key`, `key>n`, `key<n`. Keys must be qualified names and values label values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelectorRequirements {
    /// The terms, in the order written.
    pub requirements: Vec<Requirement>,
}

impl LabelSelectorRequirements {
    /// Parses a selector string such as `env=prod,tier in (gold,silver),!canary`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] naming the first problem: bad syntax, an invalid key or value,
    /// an empty `in`/`notin` set, or a non-integer bound for `>`/`<`.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let error = |message: String| SelectorError {
            selector: selector.to_owned(),
            message,
        };
        let tokens = lex(selector);
        let mut parser = Parser { tokens, pos: 0 };
        let mut requirements = Vec::new();
        if parser.peek() == &Token::End {
            return Ok(LabelSelectorRequirements { requirements });
        }
        loop {
            requirements.push(parser.requirement().map_err(error)?);
            match parser.next() {
                Token::End => break,
                Token::Comma => {
                    if parser.peek() == &Token::End {
                        return Err(error("expected a requirement after ','".to_owned()));
                    }
                }
                other => {
                    return Err(error(format!(
                        "found {}, expected ',' or end of selector",
                        other.describe()
                    )));
                }
            }
        }
        for requirement in &requirements {
            let key_errs = names::qualified_name(&requirement.key);
            if let Some(msg) = key_errs.first() {
                return Err(error(format!(
                    "invalid label key {:?}: {msg}",
                    requirement.key
                )));
            }
            for value in &requirement.values {
                if let Some(msg) = names::label_value(value).first() {
                    return Err(error(format!("invalid label value {value:?}: {msg}")));
                }
            }
        }
        Ok(LabelSelectorRequirements { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl fmt::Display for LabelSelectorRequirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelectorRequirements {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("'{s}'"),
            Token::In => "'in'".to_owned(),
            Token::NotIn => "'notin'".to_owned(),
            Token::Equals => "'='".to_owned(),
            Token::DoubleEquals => "'=='".to_owned(),
            Token::NotEquals => "'!='".to_owned(),
            Token::Bang => "'!'".to_owned(),
            Token::Greater => "'>'".to_owned(),
            Token::Less => "'<'".to_owned(),
            Token::Open => "'('".to_owned(),
            Token::Close => "')'".to_owned(),
            Token::Comma => "','".to_owned(),
            Token::End => "end of selector".to_owned(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '<' | '>')
}

/// Splits a label selector into tokens; anything that is neither whitespace nor one of
/// `=!(),<>` is part of an identifier.
fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let token = match c {
                '=' if chars.peek() == Some(&'=') => {
                    chars.next();
                    Token::DoubleEquals
                }
                '=' => Token::Equals,
                '!' if chars.peek() == Some(&'=') => {
                    chars.next();
                    Token::NotEquals
                }
                '!' => Token::Bang,
                '(' => Token::Open,
                ')' => Token::Close,
                ',' => Token::Comma,
                '<' => Token::Less,
                _ => Token::Greater,
            };
            tokens.push(token);
            continue;
        }
        let mut ident = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            ident.push(c);
            chars.next();
        }
        tokens.push(match ident.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Ident(ident),
        });
    }
    tokens.push(Token::End);
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.pos).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let token = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        token
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = if self.peek() == &Token::Bang {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            Token::Ident(key) => key,
            other => return Err(format!("found {}, expected a label key", other.describe())),
        };
        if negated {
            return Ok(Requirement {
                key,
                operator: RequirementOperator::DoesNotExist,
                values: Vec::new(),
            });
        }
        let (operator, values) = match self.peek() {
            Token::End | Token::Comma => (RequirementOperator::Exists, Vec::new()),
            Token::Equals | Token::DoubleEquals | Token::NotEquals => {
                let operator = if self.next() == Token::NotEquals {
                    RequirementOperator::NotEquals
                } else {
                    RequirementOperator::Equals
                };
                let value = match self.peek() {
                    // `key=` compares against the empty value.
                    Token::End | Token::Comma => String::new(),
                    Token::Ident(_) => match self.next() {
                        Token::Ident(value) => value,
                        _ => String::new(),
                    },
                    other => {
                        return Err(format!(
                            "found {}, expected a value after the operator",
                            other.describe()
                        ));
                    }
                };
                (operator, vec![value])
            }
            Token::Greater | Token::Less => {
                let operator = if self.next() == Token::Greater {
                    RequirementOperator::GreaterThan
                } else {
                    RequirementOperator::LessThan
                };
                match self.next() {
                    Token::Ident(value) if value.parse::<i64>().is_ok() => (operator, vec![value]),
                    other => {
                        return Err(format!(
                            "found {}, expected an integer after '>' or '<'",
                            other.describe()
                        ));
                    }
                }
            }
            Token::In | Token::NotIn => {
                let (operator, word) = if self.next() == Token::In {
                    (RequirementOperator::In, "in")
                } else {
                    (RequirementOperator::NotIn, "notin")
                };
                let values = self.value_set(word)?;
                (operator, values)
            }
            other => {
                return Err(format!(
                    "found {} after '{key}', expected one of '=', '==', '!=', 'in', 'notin', '>', '<' or ','",
                    other.describe()
                ));
            }
        };
        Ok(Requirement {
            key,
            operator,
            values,
        })
    }

    /// `( value , value ... )` after `in`/`notin`. A missing value between commas is the
    /// empty value, as in Kubernetes.
    fn value_set(&mut self, word: &str) -> Result<Vec<String>, String> {
        match self.next() {
            Token::Open => {}
            other => {
                return Err(format!(
                    "found {}, expected '(' after '{word}'",
                    other.describe()
                ));
            }
        }
        let mut values = Vec::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Token::Ident(value) if expect_value => {
                    values.push(value);
                    expect_value = false;
                }
                Token::Comma => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                Token::Close => {
                    if expect_value && !values.is_empty() {
                        values.push(String::new());
                    }
                    break;
                }
                other => {
                    return Err(format!(
                        "found {}, expected a value, ',' or ')' in the '{word}' set",
                        other.describe()
                    ));
                }
            }
        }
        if values.is_empty() {
            return Err(format!("the '{word}' set must name at least one value"));
        }
        values.sort();
        values.dedup();
        Ok(values)
    }
}

// ---------------------------------------------------------------------------------------
// LabelSelector (API type)

string_enum! {
    /// How a label selector expression compares a label.
    pub enum LabelSelectorOperator {
        /// The label is present with one of the values.
        In => "In",
        /// The label is absent, or present with none of the values.
        NotIn => "NotIn",
        /// The label is present (values must be empty).
        Exists => "Exists",
        /// The label is absent (values must be empty).
        DoesNotExist => "DoesNotExist",
    }
}

/// One expression of a [`LabelSelector`], e.g. `{key: tier, operator: In, values: [gold]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key the expression applies to.
    #[serde(default)]
    pub key: String,
    /// How the label is compared: `In`, `NotIn`, `Exists` or `DoesNotExist`
    /// (case-insensitive).
    pub operator: LabelSelectorOperator,
    /// The values for `In` and `NotIn` (at least one); must be empty for `Exists` and
    /// `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this expression. An `In` with no values matches nothing,
    /// a `NotIn` with no values matches everything (validation rejects both).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let listed = value.is_some_and(|v| self.values.iter().any(|x| x == v));
        match self.operator {
            LabelSelectorOperator::In => listed,
            LabelSelectorOperator::NotIn => !listed,
            LabelSelectorOperator::Exists => value.is_some(),
            LabelSelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Selects objects by their labels: every `matchLabels` entry and every
/// `matchExpressions` item must hold. An empty selector (`{}`) matches every object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values, e.g. `{env: prod}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Further expressions on labels, e.g. `{key: tier, operator: In, values: [gold]}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// A selector requiring exactly these labels.
    pub fn from_labels<K: Into<String>, V: Into<String>>(
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        LabelSelector {
            match_labels: labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Whether the selector has no term (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }

    /// The same selector as parsed string requirements (for printing, e.g. `env=prod`).
    pub fn to_requirements(&self) -> LabelSelectorRequirements {
        let mut requirements: Vec<Requirement> = self
            .match_labels
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: RequirementOperator::Equals,
                values: vec![v.clone()],
            })
            .collect();
        for expression in &self.match_expressions {
            let mut values = expression.values.clone();
            values.sort();
            values.dedup();
            let operator = match expression.operator {
                LabelSelectorOperator::In => RequirementOperator::In,
                LabelSelectorOperator::NotIn => RequirementOperator::NotIn,
                LabelSelectorOperator::Exists => RequirementOperator::Exists,
                LabelSelectorOperator::DoesNotExist => RequirementOperator::DoesNotExist,
            };
            requirements.push(Requirement {
                key: expression.key.clone(),
                operator,
                values,
            });
        }
        LabelSelectorRequirements { requirements }
    }

    /// Validates keys (qualified names), values (label values), and that `values` are
    /// given for `In`/`NotIn` and absent for `Exists`/`DoesNotExist`.
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = crate::meta::validate_labels(&self.match_labels, &path.child("matchLabels"));
        let expressions = path.child("matchExpressions");
        for (i, expression) in self.match_expressions.iter().enumerate() {
            let at = expressions.index(i);
            for msg in names::qualified_name(&expression.key) {
                errs.push(FieldError::invalid(at.child("key"), &expression.key, msg));
            }
            match expression.operator {
                LabelSelectorOperator::In | LabelSelectorOperator::NotIn => {
                    if expression.values.is_empty() {
                        errs.push(FieldError::required(
                            at.child("values"),
                            "must be specified when `operator` is 'In' or 'NotIn'",
                        ));
                    }
                }
                LabelSelectorOperator::Exists | LabelSelectorOperator::DoesNotExist => {
                    if !expression.values.is_empty() {
                        errs.push(FieldError::forbidden(
                            at.child("values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ));
                    }
                }
            }
            for (j, value) in expression.values.iter().enumerate() {
                for msg in names::label_value(value) {
                    errs.push(FieldError::invalid(at.child("values").index(j), value, msg));
                }
            }
        }
        errs
    }
}

// ---------------------------------------------------------------------------------------
// Field selectors

/// The operator of a field selector term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a field selector, e.g. `metadata.name=shop`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field, e.g. `metadata.name`.
    pub field: String,
    /// The comparison.
    pub operator: FieldOperator,
    /// The value compared against, unescaped.
    pub value: String,
}

/// A parsed field selector: all terms must hold. The empty selector matches everything.
///
/// Syntax: terms separated by `,`, each `field=value`, `field==value` or
/// `field!=value`; `\,`, `\=` and `\\` escape those characters in values, as in
/// Kubernetes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// The terms, in the order written.
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a field selector string such as `metadata.name=shop`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] for a term without operator, without field name, or with a bad
    /// escape.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let error = |message: String| SelectorError {
            selector: selector.to_owned(),
            message,
        };
        let mut requirements = Vec::new();
        for term in split_unescaped(selector, ',') {
            if term.trim().is_empty() {
                continue;
            }
            let Some((field, operator, raw)) = split_field_term(term) else {
                return Err(error(format!(
                    "can't understand {term:?}: expected field=value, field==value or field!=value"
                )));
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(error(format!("missing field name in {term:?}")));
            }
            let value = unescape(raw.trim()).map_err(error)?;
            requirements.push(FieldRequirement {
                field: field.to_owned(),
                operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// The fields the selector refers to, in order, without repeats; the caller rejects
    /// those it does not support.
    pub fn fields(&self) -> Vec<&str> {
        let mut fields: Vec<&str> = Vec::new();
        for requirement in &self.requirements {
            if !fields.contains(&requirement.field.as_str()) {
                fields.push(&requirement.field);
            }
        }
        fields
    }

    /// Whether every term holds, looking fields up with `get` (a missing field counts as
    /// the empty string, as in Kubernetes).
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = get(&r.field).unwrap_or_default();
            match r.operator {
                FieldOperator::Equals => value == r.value,
                FieldOperator::NotEquals => value != r.value,
            }
        })
    }

    /// The value `field` must equal if the selector pins it (`metadata.name=shop` →
    /// `Some("shop")`), letting the caller fetch one object instead of listing.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// Whether this selector has no term.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Splits at `sep` where it is not escaped with `\`.
fn split_unescaped(input: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in input.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&input[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&input[start..]);
    parts
}

/// Finds the first unescaped `!=`, `==` or `=` in a term.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let bytes = term.as_bytes();
    let mut escaped = false;
    for i in 0..bytes.len() {
        if escaped {
            escaped = false;
            continue;
        }
        match bytes[i] {
            b'\\' => escaped = true,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::NotEquals, &term[i + 2..]));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::Equals, &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], FieldOperator::Equals, &term[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Resolves `\\`, `\,` and `\=`; any other escape is an error.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=')) => out.push(e),
            Some(e) => {
                return Err(format!(
                    "invalid escape sequence '\\{e}' in value {value:?}"
                ));
            }
            None => return Err(format!("unterminated escape sequence in value {value:?}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelectorRequirements {
        LabelSelectorRequirements::parse(s).unwrap()
    }

    #[test]
    fn parse_every_operator() {
        let s = sel(" a=b , c==d,e != f,g in (y, x,y),h notin (z),i,!j,k>5,l<7");
        let ops: Vec<RequirementOperator> = s.requirements.iter().map(|r| r.operator).collect();
        use RequirementOperator::*;
        assert_eq!(
            ops,
            vec![
                Equals,
                Equals,
                NotEquals,
                In,
                NotIn,
                Exists,
                DoesNotExist,
                GreaterThan,
                LessThan
            ]
        );
        assert_eq!(s.requirements[3].values, vec!["x", "y"]);
        assert_eq!(
            s.to_string(),
            "a=b,c=d,e!=f,g in (x,y),h notin (z),i,!j,k>5,l<7"
        );
        assert!(sel("").is_empty());
        assert!(sel("   ").is_empty());
        assert_eq!(sel("a=").requirements[0].values, vec![""]);
        assert_eq!(
            sel("example.com/tier in (gold)").requirements[0].key,
            "example.com/tier"
        );
    }

    #[test]
    fn matching() {
        let l = labels(&[("env", "prod"), ("tier", "gold"), ("n", "10")]);
        for (s, want) in [
            ("", true),
            ("env=prod", true),
            ("env==prod", true),
            ("env=dev", false),
            ("env!=dev", true),
            ("missing!=x", true),
            ("tier in (gold,silver)", true),
            ("tier in (silver)", false),
            ("missing in (x)", false),
            ("tier notin (silver)", true),
            ("missing notin (x)", true),
            ("tier notin (gold)", false),
            ("env", true),
            ("missing", false),
            ("!missing", true),
            ("!env", false),
            ("n>5", true),
            ("n<5", false),
            ("env>5", false),
            ("env=prod,tier=gold", true),
            ("env=prod,tier=silver", false),
        ] {
            assert_eq!(sel(s).matches(&l), want, "{s}");
        }
    }

    #[test]
    fn parse_errors() {
        for (s, want) in [
            ("a in x", "found 'x', expected '(' after 'in'"),
            ("a in ()", "the 'in' set must name at least one value"),
            (
                "a in (x",
                "found end of selector, expected a value, ',' or ')' in the 'in' set",
            ),
            ("a b", "found 'b' after 'a', expected one of"),
            ("a=b,", "expected a requirement after ','"),
            (",a", "found ',', expected a label key"),
            ("!", "found end of selector, expected a label key"),
            ("a=b)", "found ')', expected ',' or end of selector"),
            ("a>x", "expected an integer after '>' or '<'"),
            ("a=(", "found '(', expected a value after the operator"),
            ("a=b c", "found 'c', expected ',' or end of selector"),
            ("-a=b", "invalid label key \"-a\""),
            ("a=-b", "invalid label value \"-b\""),
        ] {
            let err = LabelSelectorRequirements::parse(s).unwrap_err();
            assert!(err.message.contains(want), "{s}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("unable to parse selector {s:?}: "))
            );
        }
    }

    #[test]
    fn label_selector_api_type() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"env": "prod"},
            "matchExpressions": [
                {"key": "tier", "operator": "in", "values": ["gold", "silver"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        assert_eq!(
            selector.match_expressions[0].operator,
            LabelSelectorOperator::In
        );
        assert_eq!(
            serde_json::to_value(&selector).unwrap()["matchExpressions"][0]["operator"],
            "In"
        );
        assert!(selector.matches(&labels(&[("env", "prod"), ("tier", "gold")])));
        assert!(!selector.matches(&labels(&[("env", "prod"), ("tier", "bronze")])));
        assert!(!selector.matches(&labels(&[
            ("env", "prod"),
            ("tier", "gold"),
            ("canary", "")
        ])));
        assert!(!selector.matches(&labels(&[("tier", "gold")])));
        assert_eq!(
            selector.to_requirements().to_string(),
            "env=prod,tier in (gold,silver),!canary"
        );
        assert!(LabelSelector::default().matches(&BTreeMap::new()));
        assert!(LabelSelector::from_labels([("env", "prod")]).matches(&labels(&[("env", "prod")])));
        assert!(selector.validate(&FieldPath::new("sel")).is_empty());
    }

    #[test]
    fn label_selector_validation() {
        let selector = LabelSelector {
            match_labels: labels(&[("env", "bad value")]),
            match_expressions: vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: LabelSelectorOperator::In,
                    values: vec![],
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: LabelSelectorOperator::Exists,
                    values: vec!["x".into()],
                },
                LabelSelectorRequirement {
                    key: "a/b/c".into(),
                    operator: LabelSelectorOperator::NotIn,
                    values: vec!["-x".into()],
                },
            ],
        };
        let errs: Vec<String> = selector
            .validate(
                &FieldPath::new("spec")
                    .child("placement")
                    .child("clusterSelector"),
            )
            .iter()
            .map(ToString::to_string)
            .collect();
        let p = "spec.placement.clusterSelector";
        assert_eq!(errs.len(), 5, "{errs:#?}");
        assert!(errs[0].starts_with(&format!(
            "{p}.matchLabels[env]: Invalid value: \"bad value\""
        )));
        assert_eq!(
            errs[1],
            format!(
                "{p}.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )
        );
        assert_eq!(
            errs[2],
            format!(
                "{p}.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
        );
        assert!(errs[3].starts_with(&format!(
            "{p}.matchExpressions[2].key: Invalid value: \"a/b/c\""
        )));
        assert!(errs[4].starts_with(&format!(
            "{p}.matchExpressions[2].values[0]: Invalid value: \"-x\""
        )));
    }

    #[test]
    fn field_selectors() {
        let get = |field: &str| match field {
            "metadata.name" => Some("shop".to_owned()),
            "metadata.namespace" => Some("default".to_owned()),
            _ => None,
        };
        let s =
            FieldSelector::parse("metadata.name=shop, metadata.namespace!=kube-system").unwrap();
        assert_eq!(s.fields(), vec!["metadata.name", "metadata.namespace"]);
        assert!(s.matches(get));
        assert_eq!(s.required_value("metadata.name"), Some("shop"));
        assert_eq!(s.required_value("metadata.namespace"), None);
        assert!(
            FieldSelector::parse("metadata.name==shop")
                .unwrap()
                .matches(get)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=shop")
                .unwrap()
                .matches(get)
        );
        assert!(FieldSelector::parse("spec.other=").unwrap().matches(get));
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse("").unwrap().matches(get));

        let escaped = FieldSelector::parse(r"a=x\,y\=z\\,b=c").unwrap();
        assert_eq!(escaped.requirements.len(), 2);
        assert_eq!(escaped.requirements[0].value, r"x,y=z\");
        assert_eq!(
            escaped.requirements[1],
            FieldRequirement {
                field: "b".into(),
                operator: FieldOperator::Equals,
                value: "c".into()
            }
        );

        for (s, want) in [
            ("metadata.name", "can't understand \"metadata.name\""),
            ("=x", "missing field name"),
            (r"a=\q", "invalid escape sequence"),
            (r"a=b\", "unterminated escape sequence"),
        ] {
            let err = FieldSelector::parse(s).unwrap_err();
            assert!(err.to_string().contains(want), "{s}: {err}");
        }
    }
}
