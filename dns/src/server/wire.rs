//! Raw DNS wire handling for the query path: a strict, allocation-free parser for
//! incoming queries (header, question, OPT with EDNS Client Subnet) and the writers
//! that turn a pre-encoded answer from the [`Snapshot`](crate::zone::Snapshot) into a
//! response by patching the ID, the flags, the counts and the question's letter case,
//! then appending an OPT record.
//!
//! Everything here works on byte slices and never panics: every index is checked, and
//! anything the parser does not understand is reported as an [`ParseError`] so that the
//! caller answers FORMERR or drops the packet.
//!
//! What does not belong here: deciding what to answer (that is [`crate::zone`]) and
//! sockets (that is the parent module).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::zone::Encoded;

/// Length of the fixed DNS header.
pub(crate) const HEADER_LEN: usize = 12;
/// Longest domain name on the wire, root label included (RFC 1035 §3.1).
pub(crate) const MAX_NAME_LEN: usize = 255;
/// Payload size assumed for clients without EDNS (RFC 1035 §4.2.1).
pub(crate) const CLASSIC_UDP_PAYLOAD: usize = 512;
/// The largest UDP response we send, whatever a client advertises, and the payload size
/// we advertise: DNS flag day 2020's value, which avoids IP fragmentation.
pub(crate) const MAX_UDP_PAYLOAD: u16 = 1232;

pub(crate) const TYPE_A: u16 = 1;
pub(crate) const TYPE_AAAA: u16 = 28;
pub(crate) const TYPE_SRV: u16 = 33;
pub(crate) const TYPE_OPT: u16 = 41;
pub(crate) const CLASS_IN: u16 = 1;
const OPTION_ECS: u16 = 8;

/// RCODE values used directly on the wire.
pub(crate) const RCODE_FORMERR: u8 = 1;
/// BADVERS is 16: 0 in the header, 1 in the OPT record's extended RCODE.
pub(crate) const EXT_RCODE_BADVERS: u8 = 1;

/// Header flag bits (byte 2 and byte 3 of the message).
const FLAG_QR: u8 = 0x80;
const FLAG_AA: u8 = 0x04;
const FLAG_TC: u8 = 0x02;
const FLAG_RD: u8 = 0x01;
const FLAG_CD: u8 = 0x10;
const OPCODE_MASK: u8 = 0x78;

/// A domain name in wire format, ASCII letters folded to lower case: the key of the
/// snapshot's name table. At most [`MAX_NAME_LEN`] bytes, so it lives on the stack.
#[derive(Clone)]
pub(crate) struct NameKey {
    buf: [u8; MAX_NAME_LEN],
    len: usize,
}

impl NameKey {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl std::fmt::Debug for NameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::zone::wire_to_text(self.as_bytes()))
    }
}

/// The EDNS Client Subnet option of a query, as received (RFC 7871 §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ecs {
    /// 1 (IPv4), 2 (IPv6), or 0 with a source prefix of 0 ("no address, for privacy").
    pub family: u16,
    pub source_prefix: u8,
    /// ADDRESS octets exactly as received (`ceil(source_prefix / 8)` of them).
    pub address: [u8; 16],
    pub address_len: usize,
}

impl Ecs {
    /// The client address to locate, if the option carries one (source prefix above 0);
    /// octets beyond the prefix are zero.
    pub(crate) fn client_address(&self) -> Option<IpAddr> {
        if self.source_prefix == 0 {
            return None;
        }
        match self.family {
            1 => {
                let mut octets = [0u8; 4];
                for (dst, src) in octets.iter_mut().zip(self.address.iter()) {
                    *dst = *src;
                }
                Some(IpAddr::V4(Ipv4Addr::from(octets)))
            }
            2 => Some(IpAddr::V6(Ipv6Addr::from(self.address))),
            _ => None,
        }
    }

    /// The largest scope prefix for this family (32 or 128).
    pub(crate) fn max_prefix(&self) -> u8 {
        match self.family {
            1 => 32,
            2 => 128,
            _ => 0,
        }
    }

    /// Length of the option when echoed: code, length, family, prefixes, address.
    fn encoded_len(&self) -> usize {
        4 + 4 + self.address_len
    }
}

/// The OPT record of a query (RFC 6891).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EdnsInfo {
    /// Requestor's UDP payload size (the OPT CLASS), as sent.
    pub payload: u16,
    pub version: u8,
    pub dnssec_ok: bool,
    pub ecs: Option<Ecs>,
}

/// The first question of a query.
#[derive(Clone, Debug)]
pub(crate) struct Question {
    pub key: NameKey,
    /// Byte range of the question (name, type, class) in the packet.
    pub start: usize,
    pub end: usize,
    pub qtype: u16,
    pub qclass: u16,
}

impl Question {
    /// The question's name as received (original letter case), wire format.
    pub(crate) fn raw_name<'p>(&self, packet: &'p [u8]) -> &'p [u8] {
        packet
            .get(self.start..self.end.saturating_sub(4))
            .unwrap_or(&[])
    }
}

/// What the parser understood of a query.
#[derive(Clone, Debug)]
pub(crate) struct RawQuery {
    pub id: [u8; 2],
    /// Header byte 2: QR, OPCODE, AA, TC, RD.
    pub flags_hi: u8,
    /// Header byte 3: RA, Z, AD, CD, RCODE.
    pub flags_lo: u8,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
    pub question: Option<Question>,
    pub edns: Option<EdnsInfo>,
}

impl RawQuery {
    pub(crate) fn opcode(&self) -> u8 {
        (self.flags_hi & OPCODE_MASK) >> 3
    }

    /// Whether the query has the plain shape the fast path serves: a standard query
    /// with exactly one IN question of type A, AAAA or SRV, nothing but an optional
    /// EDNS(0) OPT record after it.
    pub(crate) fn is_fast_path_shape(&self) -> bool {
        let Some(question) = &self.question else {
            return false;
        };
        self.opcode() == 0
            && self.qdcount == 1
            && self.ancount == 0
            && self.nscount == 0
            && usize::from(self.arcount) == usize::from(self.edns.is_some())
            && self.edns.as_ref().is_none_or(|edns| edns.version == 0)
            && question.qclass == CLASS_IN
            && matches!(question.qtype, TYPE_A | TYPE_AAAA | TYPE_SRV)
    }

    /// The largest response the client accepts over UDP: its EDNS payload size (at
    /// least 512, at most [`MAX_UDP_PAYLOAD`]), or 512 without EDNS.
    pub(crate) fn udp_limit(&self) -> usize {
        match &self.edns {
            Some(edns) => usize::from(edns.payload.clamp(512, MAX_UDP_PAYLOAD)),
            None => CLASSIC_UDP_PAYLOAD,
        }
    }
}

/// Why a packet could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Shorter than a header, or a response: never answered.
    Drop(&'static str),
    /// Header readable, the rest is not: answer FORMERR.
    FormErr(&'static str),
}

/// A failed parse: why, and what was understood before (to echo in FORMERR).
#[derive(Debug)]
pub(crate) struct ParseFailure {
    pub error: ParseError,
    pub partial: Option<Box<RawQuery>>,
}

/// A bounds-checked reader over a packet.
struct Reader<'p> {
    packet: &'p [u8],
    pos: usize,
}

impl<'p> Reader<'p> {
    fn u8(&mut self) -> Result<u8, ParseError> {
        let value = *self
            .packet
            .get(self.pos)
            .ok_or(ParseError::FormErr("truncated message"))?;
        self.pos += 1;
        Ok(value)
    }

    fn u16(&mut self) -> Result<u16, ParseError> {
        Ok(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }

    fn slice(&mut self, len: usize) -> Result<&'p [u8], ParseError> {
        let end = self
            .pos
            .checked_add(len)
            .ok_or(ParseError::FormErr("length overflow"))?;
        let slice = self
            .packet
            .get(self.pos..end)
            .ok_or(ParseError::FormErr("truncated message"))?;
        self.pos = end;
        Ok(slice)
    }

    /// Reads an uncompressed name into a lower-cased key.
    fn name_key(&mut self) -> Result<NameKey, ParseError> {
        let mut key = NameKey {
            buf: [0; MAX_NAME_LEN],
            len: 0,
        };
        loop {
            let len = self.u8()?;
            if len & 0xC0 != 0 {
                // Compression pointers (or the reserved label types) in the first
                // question: it cannot point anywhere meaningful.
                return Err(ParseError::FormErr(
                    "compressed or extended label in question",
                ));
            }
            let label = self.slice(usize::from(len))?;
            let needed = key.len + 1 + label.len();
            if needed > MAX_NAME_LEN {
                return Err(ParseError::FormErr("name longer than 255 octets"));
            }
            let dst = key
                .buf
                .get_mut(key.len..needed)
                .ok_or(ParseError::FormErr("name longer than 255 octets"))?;
            if let Some((first, rest)) = dst.split_first_mut() {
                *first = len;
                for (d, s) in rest.iter_mut().zip(label) {
                    *d = s.to_ascii_lowercase();
                }
            }
            key.len = needed;
            if len == 0 {
                return Ok(key);
            }
        }
    }

    /// Skips a possibly compressed name.
    fn skip_name(&mut self) -> Result<(), ParseError> {
        let mut total = 0usize;
        loop {
            let len = self.u8()?;
            match len & 0xC0 {
                0x00 => {
                    if len == 0 {
                        return Ok(());
                    }
                    total += usize::from(len) + 1;
                    if total > MAX_NAME_LEN {
                        return Err(ParseError::FormErr("name longer than 255 octets"));
                    }
                    self.slice(usize::from(len))?;
                }
                0xC0 => {
                    // A pointer ends the name; where it points does not matter here.
                    self.u8()?;
                    return Ok(());
                }
                _ => return Err(ParseError::FormErr("reserved label type")),
            }
        }
    }
}

/// Parses a query packet (tests: [`parse_lenient`] without the partial result).
#[cfg(test)]
pub(crate) fn parse(packet: &[u8]) -> Result<RawQuery, ParseError> {
    parse_lenient(packet).map_err(|failure| failure.error)
}

/// Parses a query packet: the header, every question (keeping the first), and every
/// record (skipping all but the OPT record, which it parses with its options). On a
/// FORMERR it still returns what was understood (the header, and the question and OPT
/// record if they were read) so that the error response can echo them.
pub(crate) fn parse_lenient(packet: &[u8]) -> Result<RawQuery, ParseFailure> {
    let fail = |error, partial: Option<RawQuery>| ParseFailure {
        error,
        partial: partial.map(Box::new),
    };
    if packet.len() < HEADER_LEN {
        return Err(fail(ParseError::Drop("shorter than a DNS header"), None));
    }
    let mut r = Reader { packet, pos: 0 };
    let header = (|| -> Result<RawQuery, ParseError> {
        Ok(RawQuery {
            id: [r.u8()?, r.u8()?],
            flags_hi: r.u8()?,
            flags_lo: r.u8()?,
            qdcount: r.u16()?,
            ancount: r.u16()?,
            nscount: r.u16()?,
            arcount: r.u16()?,
            question: None,
            edns: None,
        })
    })();
    let mut query = match header {
        Ok(query) => query,
        Err(error) => return Err(fail(error, None)),
    };
    if query.flags_hi & FLAG_QR != 0 {
        return Err(fail(ParseError::Drop("a response, not a query"), None));
    }
    match parse_body(&mut r, &mut query) {
        Ok(()) => Ok(query),
        Err(error) => Err(fail(error, Some(query))),
    }
}

fn parse_body(r: &mut Reader<'_>, query: &mut RawQuery) -> Result<(), ParseError> {
    for index in 0..query.qdcount {
        if index == 0 {
            let start = r.pos;
            let key = r.name_key()?;
            let qtype = r.u16()?;
            let qclass = r.u16()?;
            query.question = Some(Question {
                key,
                start,
                end: r.pos,
                qtype,
                qclass,
            });
        } else {
            r.skip_name()?;
            r.u16()?;
            r.u16()?;
        }
    }
    let records = u32::from(query.ancount) + u32::from(query.nscount);
    for _ in 0..records {
        // RFC 6891 §6.1.1: OPT belongs in the additional section only. (hickory would
        // also log a WARN for each one with broken options: a log flood on demand.)
        let start = r.pos;
        r.skip_name()?;
        if r.u16()? == TYPE_OPT {
            return Err(ParseError::FormErr(
                "OPT record outside the additional section",
            ));
        }
        r.pos = start;
        skip_record(r)?;
    }
    for _ in 0..query.arcount {
        let start = r.pos;
        r.skip_name()?;
        let rtype = r.u16()?;
        if rtype != TYPE_OPT {
            let _class = r.u16()?;
            let _ttl = r.u32()?;
            let rdlen = r.u16()?;
            r.slice(usize::from(rdlen))?;
            continue;
        }
        if query.edns.is_some() {
            return Err(ParseError::FormErr("more than one OPT record"));
        }
        if r.packet.get(start) != Some(&0) || r.pos != start + 3 {
            return Err(ParseError::FormErr(
                "OPT record with a name other than the root",
            ));
        }
        let payload = r.u16()?;
        let ttl = r.u32()?;
        let rdlen = r.u16()?;
        let rdata = r.slice(usize::from(rdlen))?;
        let [_ext_rcode, version, flags_hi, _flags_lo] = ttl.to_be_bytes();
        query.edns = Some(EdnsInfo {
            payload,
            version,
            dnssec_ok: flags_hi & 0x80 != 0,
            ecs: None,
        });
        let ecs = parse_options(rdata)?;
        if let Some(edns) = &mut query.edns {
            edns.ecs = ecs;
        }
    }
    // Trailing bytes after the last record are ignored, as most servers do.
    Ok(())
}

fn skip_record(r: &mut Reader<'_>) -> Result<(), ParseError> {
    r.skip_name()?;
    let _type = r.u16()?;
    let _class = r.u16()?;
    let _ttl = r.u32()?;
    let rdlen = r.u16()?;
    r.slice(usize::from(rdlen))?;
    Ok(())
}

/// Walks the options of an OPT record; returns the ECS option if there is one.
fn parse_options(rdata: &[u8]) -> Result<Option<Ecs>, ParseError> {
    let mut r = Reader {
        packet: rdata,
        pos: 0,
    };
    let mut ecs = None;
    while r.pos < rdata.len() {
        let code = r.u16()?;
        let len = r.u16()?;
        let data = r.slice(usize::from(len))?;
        if code == OPTION_ECS {
            if ecs.is_some() {
                return Err(ParseError::FormErr("more than one client subnet option"));
            }
            ecs = Some(parse_ecs(data)?);
        }
        // Other options (cookies, NSID, padding, ...) are not implemented and ignored,
        // as RFC 6891 §6.1.2 asks.
    }
    Ok(ecs)
}

/// Validates an ECS option as RFC 7871 §6 and §7.1.1 ask (FORMERR on any violation).
fn parse_ecs(data: &[u8]) -> Result<Ecs, ParseError> {
    let (head, address) = data.split_at_checked(4).ok_or(ParseError::FormErr(
        "client subnet option shorter than 4 octets",
    ))?;
    let family = u16::from_be_bytes([head[0], head[1]]);
    let source_prefix = head[2];
    let max = match family {
        1 => 32,
        2 => 128,
        0 if source_prefix == 0 => 0,
        _ => return Err(ParseError::FormErr("client subnet with an unknown family")),
    };
    if source_prefix > max {
        return Err(ParseError::FormErr("client subnet source prefix too long"));
    }
    let address_len = usize::from(source_prefix).div_ceil(8);
    if address.len() != address_len {
        return Err(ParseError::FormErr(
            "client subnet address of the wrong length",
        ));
    }
    let spare_bits = address_len * 8 - usize::from(source_prefix);
    if spare_bits > 0 {
        let last = address.last().copied().unwrap_or(0);
        let mask = (1u8 << spare_bits) - 1;
        if last & mask != 0 {
            return Err(ParseError::FormErr(
                "client subnet address has bits set beyond the source prefix",
            ));
        }
    }
    let mut octets = [0u8; 16];
    for (dst, src) in octets.iter_mut().zip(address) {
        *dst = *src;
    }
    Ok(Ecs {
        family,
        source_prefix,
        address: octets,
        address_len,
    })
}

/// What goes into the OPT record of a response.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptOut<'a> {
    pub dnssec_ok: bool,
    pub ext_rcode: u8,
    /// The query's ECS option and the scope prefix to answer with.
    pub ecs: Option<(&'a Ecs, u8)>,
}

impl<'a> OptOut<'a> {
    /// The OPT record answering `edns`, with the given ECS scope.
    pub(crate) fn for_query(edns: &'a EdnsInfo, scope: u8) -> Self {
        OptOut {
            dnssec_ok: edns.dnssec_ok,
            ext_rcode: 0,
            ecs: edns
                .ecs
                .as_ref()
                .map(|ecs| (ecs, scope.min(ecs.max_prefix()))),
        }
    }

    fn len(&self) -> usize {
        11 + self.ecs.map_or(0, |(ecs, _)| ecs.encoded_len())
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.push(0); // root
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&MAX_UDP_PAYLOAD.to_be_bytes());
        out.push(self.ext_rcode);
        out.push(0); // version
        out.push(if self.dnssec_ok { 0x80 } else { 0 });
        out.push(0);
        let rdlen = self.ecs.map_or(0, |(ecs, _)| ecs.encoded_len());
        out.extend_from_slice(&(rdlen as u16).to_be_bytes());
        if let Some((ecs, scope)) = self.ecs {
            out.extend_from_slice(&OPTION_ECS.to_be_bytes());
            out.extend_from_slice(&((4 + ecs.address_len) as u16).to_be_bytes());
            out.extend_from_slice(&ecs.family.to_be_bytes());
            out.push(ecs.source_prefix);
            out.push(scope);
            out.extend_from_slice(ecs.address.get(..ecs.address_len).unwrap_or(&[]));
        }
    }
}

fn put_u16(out: &mut [u8], at: usize, value: u16) {
    if let Some(dst) = out.get_mut(at..at + 2) {
        dst.copy_from_slice(&value.to_be_bytes());
    }
}

fn get_u16(bytes: &[u8], at: usize) -> u16 {
    match bytes.get(at..at + 2) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    }
}

/// Response flag bytes for a query: QR and AA set (when `authoritative`), OPCODE, RD
/// and CD copied, the given RCODE (low 4 bits).
fn response_flags(query: &RawQuery, authoritative: bool, rcode: u8) -> (u8, u8) {
    let mut hi = FLAG_QR | (query.flags_hi & (OPCODE_MASK | FLAG_RD));
    if authoritative {
        hi |= FLAG_AA;
    }
    let lo = (query.flags_lo & FLAG_CD) | (rcode & 0x0F);
    (hi, lo)
}

/// Writes the response to a fast-path query from a pre-encoded answer: the ID, flags,
/// counts and question letter case patched in, an OPT record appended when the query
/// had one. When the whole response exceeds `limit`, the additional section is dropped
/// first (RFC 2181 §9: no TC needed for that); when it still does not fit, a truncated
/// response (TC set, question only) is written instead.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_fast_response(
    encoded: &Encoded,
    serial: u32,
    query: &RawQuery,
    packet: &[u8],
    scope: u8,
    limit: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    let opt = query
        .edns
        .as_ref()
        .map(|edns| OptOut::for_query(edns, scope));
    let opt_len = opt.as_ref().map_or(0, OptOut::len);
    let (body_len, additional) = if encoded.wire.len() + opt_len <= limit {
        (encoded.wire.len(), encoded.additional_count)
    } else if encoded.answer_end + opt_len <= limit {
        (encoded.answer_end, 0)
    } else {
        write_truncated(query, packet, scope, out);
        return;
    };
    out.extend_from_slice(encoded.wire.get(..body_len).unwrap_or(&[]));
    if out.len() < HEADER_LEN {
        // A pre-encoded answer always has a header; be defensive anyway.
        out.clear();
        return;
    }
    let (hi, lo) = response_flags(query, true, encoded.rcode);
    out[0] = query.id[0];
    out[1] = query.id[1];
    out[2] = hi;
    out[3] = lo;
    put_u16(out, 10, additional + u16::from(opt.is_some()));
    if let Some(dst) = encoded
        .serial_at
        .and_then(|at| out.get_mut(at..at.saturating_add(4)))
    {
        dst.copy_from_slice(&serial.to_be_bytes());
    }
    // Give the client its question back in its own letter case (DNS 0x20).
    if let Some(question) = &query.question {
        let raw = question.raw_name(packet);
        if let Some(dst) = out.get_mut(HEADER_LEN..HEADER_LEN + raw.len()) {
            dst.copy_from_slice(raw);
        }
    }
    if let Some(opt) = opt {
        opt.write(out);
    }
}

/// A truncated response: the header with TC set, the question, and the OPT record.
pub(crate) fn write_truncated(query: &RawQuery, packet: &[u8], scope: u8, out: &mut Vec<u8>) {
    out.clear();
    let (hi, lo) = response_flags(query, true, 0);
    out.extend_from_slice(&query.id);
    out.push(hi | FLAG_TC);
    out.push(lo);
    let question = query
        .question
        .as_ref()
        .and_then(|q| packet.get(q.start..q.end));
    out.extend_from_slice(&u16::from(question.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&u16::from(query.edns.is_some()).to_be_bytes());
    if let Some(question) = question {
        out.extend_from_slice(question);
    }
    if let Some(edns) = &query.edns {
        OptOut::for_query(edns, scope).write(out);
    }
}

/// An error response (FORMERR, BADVERS, REFUSED, ...) built from the raw query alone:
/// header, the question if it was read, and an OPT record if the query had one.
pub(crate) fn write_error(
    query: &RawQuery,
    packet: &[u8],
    rcode: u8,
    ext_rcode: u8,
    out: &mut Vec<u8>,
) {
    out.clear();
    let (hi, lo) = response_flags(query, false, rcode);
    out.extend_from_slice(&query.id);
    out.push(hi);
    out.push(lo);
    let question = query
        .question
        .as_ref()
        .and_then(|q| packet.get(q.start..q.end));
    out.extend_from_slice(&u16::from(question.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&u16::from(query.edns.is_some()).to_be_bytes());
    if let Some(question) = question {
        out.extend_from_slice(question);
    }
    if let Some(edns) = &query.edns {
        let mut opt = OptOut::for_query(edns, 0);
        opt.ext_rcode = ext_rcode;
        opt.write(out);
    }
}

/// FORMERR for a packet whose header is readable and whose body is not.
pub(crate) fn write_formerr_header(packet: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let (Some(&[id0, id1, hi, lo]), true) = (packet.get(..4), packet.len() >= HEADER_LEN) else {
        return;
    };
    out.extend_from_slice(&[id0, id1]);
    out.push(FLAG_QR | (hi & (OPCODE_MASK | FLAG_RD)));
    out.push((lo & FLAG_CD) | RCODE_FORMERR);
    out.extend_from_slice(&[0; 8]);
}

/// Finishes a response encoded by hickory (without OPT): patches the question's letter
/// case, appends the OPT record, and truncates when it exceeds `limit`. `scope` is the
/// ECS scope prefix; `allow_truncation` is false for TCP.
pub(crate) fn finish_response(
    mut encoded: Vec<u8>,
    query: &RawQuery,
    packet: &[u8],
    opt: Option<OptOut<'_>>,
    limit: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    if encoded.len() < HEADER_LEN {
        return;
    }
    let opt_len = opt.as_ref().map_or(0, OptOut::len);
    if encoded.len() + opt_len > limit {
        let scope = opt.and_then(|o| o.ecs).map_or(0, |(_, scope)| scope);
        write_truncated(query, packet, scope, out);
        return;
    }
    if let Some(question) = &query.question {
        let raw = question.raw_name(packet);
        if get_u16(&encoded, 4) >= 1
            && let Some(dst) = encoded.get_mut(HEADER_LEN..HEADER_LEN + raw.len())
            && dst.eq_ignore_ascii_case(raw)
        {
            dst.copy_from_slice(raw);
        }
    }
    if let Some(opt) = opt {
        let additional = get_u16(&encoded, 10).saturating_add(1);
        put_u16(&mut encoded, 10, additional);
        opt.write(&mut encoded);
    }
    *out = encoded;
}

/// Turns a response into its RRL "slip" (`server/rrl.rs`): the header with TC set and
/// no records, the question and the OPT record (with its ECS option) kept, so that a
/// real resolver retries over TCP. A response that cannot be walked keeps only its
/// header.
pub(crate) fn slip_response(out: &mut Vec<u8>) {
    if out.len() < HEADER_LEN {
        out.clear();
        return;
    }
    let response = std::mem::take(out);
    let mut r = Reader {
        packet: &response,
        pos: HEADER_LEN,
    };
    let question = (get_u16(&response, 4) >= 1)
        .then(|| -> Result<std::ops::Range<usize>, ParseError> {
            r.skip_name()?;
            r.u16()?;
            r.u16()?;
            Ok(HEADER_LEN..r.pos)
        })
        .and_then(Result::ok);
    let mut opt = None;
    if question.is_some() && get_u16(&response, 4) == 1 {
        let records = u32::from(get_u16(&response, 6)) + u32::from(get_u16(&response, 8));
        let walked = (0..records).try_for_each(|_| skip_record(&mut r));
        if walked.is_ok() {
            for _ in 0..get_u16(&response, 10) {
                let start = r.pos;
                let is_opt =
                    response.get(start) == Some(&0) && get_u16(&response, start + 1) == TYPE_OPT;
                if skip_record(&mut r).is_err() {
                    break;
                }
                if is_opt {
                    opt = Some(start..r.pos);
                    break;
                }
            }
        }
    }
    out.extend_from_slice(response.get(..HEADER_LEN).unwrap_or(&[]));
    if let Some(flags) = out.get_mut(2) {
        *flags |= FLAG_TC;
    }
    put_u16(out, 4, u16::from(question.is_some()));
    put_u16(out, 6, 0);
    put_u16(out, 8, 0);
    put_u16(out, 10, u16::from(opt.is_some()));
    for range in [question, opt].into_iter().flatten() {
        out.extend_from_slice(response.get(range).unwrap_or(&[]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ECS option fields: family, source prefix, address octets.
    type EcsFields<'a> = (u16, u8, &'a [u8]);

    /// A query as `dig` sends it; `edns` = (payload, ECS).
    pub(crate) fn query_bytes(
        id: u16,
        name: &str,
        qtype: u16,
        edns: Option<(u16, Option<EcsFields<'_>>)>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&[0x01, 0x20]); // RD, AD
        out.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
        out.extend_from_slice(&u16::from(edns.is_some()).to_be_bytes());
        for label in name.trim_end_matches('.').split('.') {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out.extend_from_slice(&qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        if let Some((payload, ecs)) = edns {
            out.push(0);
            out.extend_from_slice(&TYPE_OPT.to_be_bytes());
            out.extend_from_slice(&payload.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x80, 0]);
            match ecs {
                Some((family, source, address)) => {
                    let len = 4 + address.len();
                    out.extend_from_slice(&((len + 4) as u16).to_be_bytes());
                    out.extend_from_slice(&OPTION_ECS.to_be_bytes());
                    out.extend_from_slice(&(len as u16).to_be_bytes());
                    out.extend_from_slice(&family.to_be_bytes());
                    out.push(source);
                    out.push(0);
                    out.extend_from_slice(address);
                }
                None => out.extend_from_slice(&[0, 0]),
            }
        }
        out
    }

    #[test]
    fn parses_a_plain_query_and_lowercases_the_key() {
        let packet = query_bytes(7, "Shop.Example.COM", TYPE_A, None);
        let query = parse(&packet).unwrap();
        assert_eq!(query.id, [0, 7]);
        assert!(query.is_fast_path_shape());
        let question = query.question.as_ref().unwrap();
        assert_eq!(question.key.as_bytes(), b"\x04shop\x07example\x03com\x00");
        assert_eq!(
            question.raw_name(&packet),
            b"\x04Shop\x07Example\x03COM\x00"
        );
        assert_eq!(query.udp_limit(), 512);
    }

    #[test]
    fn parses_ecs_and_payload() {
        let packet = query_bytes(
            1,
            "a.test",
            TYPE_AAAA,
            Some((4096, Some((1, 24, &[203, 0, 113])))),
        );
        let query = parse(&packet).unwrap();
        assert!(query.is_fast_path_shape());
        let edns = query.edns.as_ref().unwrap();
        assert!(edns.dnssec_ok);
        assert_eq!(query.udp_limit(), usize::from(MAX_UDP_PAYLOAD));
        let ecs = edns.ecs.as_ref().unwrap();
        assert_eq!(ecs.client_address(), Some("203.0.113.0".parse().unwrap()));
        assert_eq!(ecs.source_prefix, 24);
    }

    #[test]
    fn rejects_opt_outside_the_additional_section() {
        let mut packet = query_bytes(1, "a.test", TYPE_A, Some((1232, None)));
        // Move the OPT record to the answer section: AN=1, AR=0.
        packet[7] = 1;
        packet[11] = 0;
        assert_eq!(
            parse(&packet).unwrap_err(),
            ParseError::FormErr("OPT record outside the additional section")
        );
    }

    #[test]
    fn rejects_bad_ecs() {
        // Bits beyond the source prefix.
        let packet = query_bytes(
            1,
            "a.test",
            TYPE_A,
            Some((1232, Some((1, 24, &[203, 0, 113, 5])))),
        );
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
        let packet = query_bytes(
            1,
            "a.test",
            TYPE_A,
            Some((1232, Some((1, 23, &[203, 0, 113])))),
        );
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
        // Unknown family.
        let packet = query_bytes(1, "a.test", TYPE_A, Some((1232, Some((3, 8, &[1])))));
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
        // Source prefix longer than the family allows.
        let packet = query_bytes(
            1,
            "a.test",
            TYPE_A,
            Some((1232, Some((1, 33, &[1, 2, 3, 4, 5])))),
        );
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
        // Family 0 with prefix 0 is the privacy form: accepted, no address.
        let packet = query_bytes(1, "a.test", TYPE_A, Some((1232, Some((0, 0, &[])))));
        let query = parse(&packet).unwrap();
        assert_eq!(query.edns.unwrap().ecs.unwrap().client_address(), None);
    }

    #[test]
    fn drops_short_packets_and_responses() {
        assert!(matches!(parse(&[1, 2, 3]), Err(ParseError::Drop(_))));
        let mut packet = query_bytes(1, "a.test", TYPE_A, None);
        packet[2] |= 0x80;
        assert!(matches!(parse(&packet), Err(ParseError::Drop(_))));
    }

    #[test]
    fn rejects_oversized_labels_and_names() {
        let mut packet = query_bytes(1, "a.test", TYPE_A, None);
        packet.truncate(HEADER_LEN);
        packet.push(64);
        packet.extend_from_slice(&[b'a'; 64]);
        packet.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
        let mut packet = query_bytes(1, "a.test", TYPE_A, None);
        packet.truncate(HEADER_LEN);
        for _ in 0..5 {
            packet.push(63);
            packet.extend_from_slice(&[b'a'; 63]);
        }
        packet.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert!(matches!(parse(&packet), Err(ParseError::FormErr(_))));
    }

    #[test]
    fn formerr_keeps_the_id() {
        let packet = [0xAB, 0xCD, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 5, b'a'];
        let mut out = Vec::new();
        write_formerr_header(&packet, &mut out);
        assert_eq!(&out[..4], &[0xAB, 0xCD, 0x81, RCODE_FORMERR]);
        assert_eq!(out.len(), HEADER_LEN);
    }
}
