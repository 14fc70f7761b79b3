//! Pre-encoded responses: [`Encoded`] (a complete response in wire format, with the
//! records it was made from), [`Prepared`] (the responses to one question under one
//! decision and how one is picked per query: fixed, round robin, by weight) and
//! [`Rendered`] (an ingress's A, AAAA and SRV answers under one decision).
//!
//! What does not belong here: which records go in a response (see `render`), patching a
//! response per query (ID, flags, OPT: see `crate::server`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use tracing::warn;

use super::names::name_key;
use crate::routing::Answer;

/// A complete response, pre-encoded with ID 0 and the question in lower case; the
/// server patches the ID, flags, ARCOUNT and letter case and appends OPT.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) wire: Box<[u8]>,
    /// Length of the response without its additional section.
    pub(crate) answer_end: usize,
    pub(crate) additional_count: u16,
    /// RCODE (low 4 bits).
    pub(crate) rcode: u8,
    pub(crate) answers: Vec<Record>,
    pub(crate) authority: Vec<Record>,
    pub(crate) additional: Vec<Record>,
    /// Offset in `wire` of the SOA serial when the authority section ends with the
    /// zone's SOA (negative answers): the server writes the current serial there, so
    /// answers reused across snapshots
    /// ([`Snapshot::rebuild`](super::Snapshot::rebuild)) never carry an old one.
    pub(crate) serial_at: Option<usize>,
}

impl Encoded {
    /// Encodes a response to (`qname`, `qtype`) with these sections.
    pub(super) fn new(
        qname: &Name,
        qtype: RecordType,
        rcode: ResponseCode,
        answers: Vec<Record>,
        authority: Vec<Record>,
        additional: Vec<Record>,
    ) -> Self {
        let mut message = Message::response(0, OpCode::Query);
        message.metadata.authoritative = true;
        message.metadata.response_code = rcode;
        message.add_query(Query::query(qname.clone(), qtype));
        message.add_answers(answers.iter().cloned());
        message.add_authorities(authority.iter().cloned());
        let short = message.to_vec();
        message.add_additionals(additional.iter().cloned());
        let full = message.to_vec();
        match (short, full, u16::try_from(additional.len())) {
            (Ok(short), Ok(full), Ok(additional_count)) if full.len() <= usize::from(u16::MAX) => {
                // An SOA's RDATA ends with serial, refresh, retry, expire, minimum.
                let serial_at = authority
                    .last()
                    .filter(|r| r.record_type() == RecordType::SOA)
                    .and_then(|_| short.len().checked_sub(20));
                Encoded {
                    serial_at,
                    answer_end: short.len(),
                    wire: full.into_boxed_slice(),
                    additional_count,
                    rcode: rcode.low(),
                    answers,
                    authority,
                    additional,
                }
            }
            (short, full, _) => {
                warn!(
                    name = %qname,
                    qtype = %qtype,
                    error = ?short.err().or(full.err()),
                    "cannot encode response; answering SERVFAIL"
                );
                Encoded::servfail(qname, qtype)
            }
        }
    }

    /// SERVFAIL with the question only, encoded by hand (cannot fail).
    fn servfail(qname: &Name, qtype: RecordType) -> Self {
        let mut wire = vec![0, 0, 0x84, 0x02, 0, 1, 0, 0, 0, 0, 0, 0];
        wire.extend_from_slice(&name_key(qname));
        wire.extend_from_slice(&u16::from(qtype).to_be_bytes());
        wire.extend_from_slice(&1u16.to_be_bytes());
        Encoded {
            serial_at: None,
            answer_end: wire.len(),
            wire: wire.into_boxed_slice(),
            additional_count: 0,
            rcode: 2,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
        }
    }
}

/// The pre-encoded responses to one (name, type, decision), and how one is picked per
/// query.
#[derive(Debug)]
pub(super) enum Prepared {
    Fixed(Box<Encoded>),
    /// Rotations of one record set, picked round robin.
    Rotate {
        options: Vec<Encoded>,
        next: AtomicUsize,
    },
    /// One response per cluster, picked at random by weight (`cumulative` is the
    /// running sum of the weights, parallel to `options`).
    Weighted {
        options: Vec<Encoded>,
        cumulative: Vec<f64>,
    },
}

impl Prepared {
    /// The response for this query.
    pub(super) fn pick(&self) -> &Encoded {
        match self {
            Prepared::Fixed(encoded) => encoded,
            Prepared::Rotate { options, next } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                &options[n % options.len()]
            }
            Prepared::Weighted {
                options,
                cumulative,
            } => {
                let total = cumulative.last().copied().unwrap_or(0.0);
                let x = rand::random::<f64>() * total;
                let index = cumulative.partition_point(|&c| c <= x);
                &options[index.min(options.len() - 1)]
            }
        }
    }

    /// Every possible response with its share of queries (`None` when all are served
    /// to everyone, i.e. rotations of one set).
    pub(super) fn variants(&self) -> Vec<(&Encoded, Option<f64>)> {
        match self {
            Prepared::Fixed(encoded) => vec![(encoded.as_ref(), None)],
            Prepared::Rotate { options, .. } => {
                let first = options.first().map(|e| (e, None));
                if options.first().is_some_and(|e| {
                    e.answers
                        .first()
                        .is_some_and(|r| r.record_type() == RecordType::CNAME)
                }) {
                    // Rotating CNAMEs: each response has one target; all are served.
                    let share = 1.0 / options.len() as f64;
                    options.iter().map(|e| (e, Some(share))).collect()
                } else {
                    first.into_iter().collect()
                }
            }
            Prepared::Weighted {
                options,
                cumulative,
            } => {
                let total = cumulative.last().copied().unwrap_or(0.0);
                let mut previous = 0.0;
                options
                    .iter()
                    .zip(cumulative)
                    .map(|(e, &c)| {
                        let share = if total > 0.0 {
                            (c - previous) / total
                        } else {
                            0.0
                        };
                        previous = c;
                        (e, Some(share))
                    })
                    .collect()
            }
        }
    }

    /// The first response, without advancing anything.
    pub(super) fn pick_first(&self) -> &Encoded {
        match self {
            Prepared::Fixed(encoded) => encoded,
            Prepared::Rotate { options, .. } | Prepared::Weighted { options, .. } => &options[0],
        }
    }
}

/// A rendering borrowed from the snapshot (no reference counting on the query path) or
/// shared from an Overflow ingress's map of orders.
pub(super) enum RenderedRef<'a> {
    Borrowed(&'a Rendered),
    Shared(Arc<Rendered>),
}

impl std::ops::Deref for RenderedRef<'_> {
    type Target = Rendered;

    fn deref(&self) -> &Rendered {
        match self {
            RenderedRef::Borrowed(r) => r,
            RenderedRef::Shared(r) => r,
        }
    }
}

/// The encoded answers of one ingress under one decision.
#[derive(Debug)]
pub(super) struct Rendered {
    pub(super) answer: Answer,
    pub(super) a: Prepared,
    pub(super) aaaa: Prepared,
    /// Parallel to the ingress's SRV services.
    pub(super) srv: Vec<Prepared>,
}
