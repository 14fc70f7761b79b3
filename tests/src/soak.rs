//! Support for the hostile-input soak tests (`soak_api`, `soak_gateway`, `soak_tls`):
//! a seeded generator ([`Rng`]) feeding `arbitrary` ([`Rng::arbitrary`]), byte
//! mutations chosen structurally ([`Mutation`], [`mutate`]), raw exchanges over TCP
//! ([`exchange`]), an apiserver on port 0 ([`start_apiserver`]) and `/metrics`
//! reading ([`metric`]).
//!
//! Counts scale with `FEDINGRESS_SOAK_SCALE` (default 1; 0.1 for a quick run, 10 for a
//! long one, [`scaled`]); the seed is `FEDINGRESS_SOAK_SEED` (default fixed, printed so
//! a failure can be replayed).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Process, binary};

/// A small seeded generator (xorshift64*): the same seed replays the same run.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `FEDINGRESS_SOAK_SEED` or `default`; prints the seed.
    pub fn from_env(test: &str, default: u64) -> Self {
        let seed = std::env::var("FEDINGRESS_SOAK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("{test}: FEDINGRESS_SOAK_SEED={seed}");
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// A value of `T` built by `arbitrary` from fresh random bytes.
    pub fn arbitrary<T: for<'a> Arbitrary<'a>>(&mut self) -> T {
        let raw = self.bytes(512);
        let mut input = Unstructured::new(&raw);
        T::arbitrary(&mut input).unwrap_or_else(|_| {
            T::arbitrary(&mut Unstructured::new(&[])).expect("arbitrary from empty input")
        })
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// `default` times `FEDINGRESS_SOAK_SCALE` (at least 1).
pub fn scaled(default: usize) -> usize {
    let scale: f64 = std::env::var("FEDINGRESS_SOAK_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((default as f64 * scale) as usize).max(1)
}

/// One structural change to a byte string.
#[derive(Arbitrary, Debug, Clone)]
pub enum Mutation {
    FlipBit {
        at: u32,
        bit: u8,
    },
    SetByte {
        at: u32,
        value: u8,
    },
    /// An "interesting" value (0, 0xff, 0x7f, 0x80, a big-endian u16/u32 max) at `at`.
    Interesting {
        at: u32,
        which: u8,
    },
    Truncate {
        at: u32,
    },
    Insert {
        at: u32,
        bytes: Vec<u8>,
    },
    Remove {
        at: u32,
        len: u16,
    },
    /// Repeats `len` bytes at `at` `times` times (lengths that no longer fit).
    Repeat {
        at: u32,
        len: u8,
        times: u8,
    },
    Swap {
        a: u32,
        b: u32,
    },
}

/// Applies `mutation` to `data`; positions wrap around its length.
pub fn mutate(data: &mut Vec<u8>, mutation: &Mutation) {
    let at = |pos: u32, len: usize| if len == 0 { 0 } else { pos as usize % len };
    let len = data.len();
    match mutation {
        Mutation::FlipBit { at: pos, bit } if len > 0 => data[at(*pos, len)] ^= 1 << (bit % 8),
        Mutation::SetByte { at: pos, value } if len > 0 => data[at(*pos, len)] = *value,
        Mutation::Interesting { at: pos, which } if len > 0 => {
            const VALUES: &[&[u8]] = &[
                &[0],
                &[0xff],
                &[0x7f],
                &[0x80],
                &[0xff, 0xff],
                &[0xff, 0xff, 0xff, 0xff],
                &[0x7f, 0xff, 0xff, 0xff],
                &[0, 0, 0, 0],
            ];
            let value = VALUES[*which as usize % VALUES.len()];
            let start = at(*pos, len);
            for (i, byte) in value.iter().enumerate() {
                if let Some(slot) = data.get_mut(start + i) {
                    *slot = *byte;
                }
            }
        }
        Mutation::Truncate { at: pos } => data.truncate(at(*pos, len + 1)),
        Mutation::Insert { at: pos, bytes } => {
            let start = at(*pos, len + 1);
            data.splice(start..start, bytes.iter().take(64).copied());
        }
        Mutation::Remove { at: pos, len: n } if len > 0 => {
            let start = at(*pos, len);
            let end = (start + *n as usize).min(len);
            data.drain(start..end);
        }
        Mutation::Repeat {
            at: pos,
            len: n,
            times,
        } if len > 0 => {
            let start = at(*pos, len);
            let end = (start + (*n as usize).max(1)).min(len);
            let piece = data[start..end].to_vec();
            for _ in 0..(*times % 16) {
                data.splice(end..end, piece.iter().copied());
            }
        }
        Mutation::Swap { a, b } if len > 1 => data.swap(at(*a, len), at(*b, len)),
        _ => {}
    }
}

/// Applies 1..=`max` random mutations.
pub fn mutate_some(rng: &mut Rng, data: &mut Vec<u8>, max: usize) {
    for _ in 0..=rng.below(max) {
        let mutation: Mutation = rng.arbitrary();
        mutate(data, &mutation);
    }
}

/// Sends `request` on a new connection and reads the answer until the peer closes; a
/// peer that has said nothing after a second (it waits for more of a body that will
/// not come) gets a half-close, then up to `wait` to finish. Errors (refused, reset)
/// give what was read so far.
pub async fn exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> Vec<u8> {
    let mut answer = Vec::new();
    let Ok(Ok(mut stream)) = tokio::time::timeout(wait, tokio::net::TcpStream::connect(addr)).await
    else {
        return answer;
    };
    let _ = tokio::time::timeout(wait, stream.write_all(request)).await;
    let first = tokio::time::timeout(Duration::from_secs(1), stream.read_to_end(&mut answer)).await;
    if first.is_err() {
        let _ = stream.shutdown().await;
        let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
    }
    answer
}

/// Starts a federation-apiserver in dev mode on 127.0.0.1 port 0 with `extra` config
/// YAML and `args`; its data lives in `dir`.
pub fn start_apiserver(dir: &Path, extra: &str, args: &[&str]) -> Process {
    let config = dir.join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\ndataDir: {}\ndev: true\n{extra}",
            dir.join("data").display()
        ),
    )
    .expect("writing apiserver config");
    let mut command = Command::new(binary("federation-apiserver"));
    command.arg("--config").arg(&config).args(args);
    Process::start(command, "federation-apiserver", Duration::from_secs(60))
        .expect("apiserver starts")
}

/// `curl -sS URL`: the body as text (empty when curl fails).
pub fn curl_text(url: &str) -> String {
    Command::new("curl")
        .args(["-sS", "--max-time", "30", url])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).to_string())
        .unwrap_or_default()
}

/// The value of the sample `series` (name with labels, exactly as exposed) in a
/// Prometheus text exposition.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The values of `label` over every sample of metric `name`.
pub fn label_values(text: &str, name: &str, label: &str) -> std::collections::BTreeSet<String> {
    let prefix = format!("{name}{{");
    let key = format!("{label}=\"");
    text.lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| {
            let start = line.find(&key)? + key.len();
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_in_bounds() {
        let mut rng = Rng(7);
        for _ in 0..10_000 {
            let n = rng.below(40);
            let mut data = rng.bytes(n);
            mutate_some(&mut rng, &mut data, 4);
        }
        let mut data = b"abc".to_vec();
        mutate(&mut data, &Mutation::Truncate { at: 1 });
        assert_eq!(data, b"a");
    }

    #[test]
    fn metric_lines_are_read() {
        let text = "# HELP x y\nx{a=\"1\"} 3\nx{a=\"2\"} 4\ny 5\n";
        assert_eq!(metric(text, "y"), Some(5.0));
        assert_eq!(metric(text, "x{a=\"2\"}"), Some(4.0));
        assert_eq!(label_values(text, "x", "a").len(), 2);
    }
}
