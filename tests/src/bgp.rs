//! The test routers: BIRD 2 and FRR 8, each run inside a network namespace with control
//! sockets of its own and read back as typed values: the paths of a prefix in its RIB
//! ([`RibPath`]) and the state of a BGP session.
//!
//! Entry points: [`Router`] (either daemon, started from a [`RouterKind`]'s config) and
//! [`RibReader`] (its RIB and sessions, for any thread). BIRD: [`BirdConfig`] (a route
//! reflector that is also the router: iBGP neighbors as `rr client`s, an import
//! `bgp_local_pref` per neighbor, `protocol kernel` putting the best BGP route of each
//! prefix into the namespace's FIB), [`Bird`] (the running daemon, killed on drop),
//! [`BirdControl`] (the control-socket protocol that `birdc` speaks), [`parse_routes`].
//! FRR: [`Frr`] (`zebra` and `bgpd` on a `bgpd.conf` given as text; zebra puts bgpd's
//! best paths into the FIB), [`FrrVty`] (`vtysh` on the daemons' own vty sockets, JSON
//! answers), [`parse_frr_routes`].
//!
//! What does not belong here: the agent's speaker (GoBGP, `fedingress-gobgp`) and the
//! topology of a test (`crate::anycast`).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::Process;
use crate::netns::NetNs;

/// Why BIRD cannot run here (`bird` missing), or `None`.
pub fn unavailable() -> Option<String> {
    match Command::new("bird").arg("--version").output() {
        Ok(_) => None,
        Err(_) => Some("bird (BIRD 2) is not installed (Debian: apt-get install bird2)".into()),
    }
}

/// Why FRR cannot run here (`zebra`, `bgpd` or `vtysh` missing, or no `frr` user), or
/// `None`.
pub fn frr_unavailable() -> Option<String> {
    for daemon in [FRR_ZEBRA, FRR_BGPD] {
        if !Path::new(daemon).exists() {
            return Some(format!(
                "{daemon} is missing: FRR is not installed (Debian: apt-get install frr)"
            ));
        }
    }
    if Command::new("vtysh").arg("--version").output().is_err() {
        return Some("vtysh is missing (Debian: apt-get install frr)".into());
    }
    if frr_ids().is_none() {
        return Some("FRR is installed but there is no frr user".into());
    }
    None
}

/// FRR's daemons where Debian's `frr` (8.4) installs them: not on `PATH`.
pub const FRR_ZEBRA: &str = "/usr/lib/frr/zebra";
pub const FRR_BGPD: &str = "/usr/lib/frr/bgpd";

/// The `frr` user's uid and gid (the daemons drop to it).
fn frr_ids() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    Some((id(&["-u", "frr"])?, id(&["-g", "frr"])?))
}

/// Which daemon is the router.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RouterKind {
    /// BIRD 2 on a [`BirdConfig`].
    #[default]
    Bird,
    /// FRR 8's zebra and bgpd on a `bgpd.conf` text.
    Frr,
}

impl RouterKind {
    /// Why this router cannot run here, or `None`.
    pub fn unavailable(self) -> Option<String> {
        match self {
            RouterKind::Bird => unavailable(),
            RouterKind::Frr => frr_unavailable(),
        }
    }
}

/// A running router, either daemon; killed on drop.
pub enum Router {
    Bird(Bird),
    Frr(Frr),
}

impl Router {
    /// A new reader of its RIB and sessions (usable from any thread and namespace: the
    /// control sockets are files).
    pub fn reader(&self) -> anyhow::Result<RibReader> {
        Ok(match self {
            Router::Bird(bird) => RibReader::Bird(bird.control()?),
            Router::Frr(frr) => RibReader::Frr(frr.vty()),
        })
    }

    /// Its log so far (for failure messages).
    pub fn log(&self) -> String {
        match self {
            Router::Bird(bird) => bird.log(),
            Router::Frr(frr) => frr.log(),
        }
    }
}

/// A router's RIB and BGP sessions, read the same way from either daemon.
pub enum RibReader {
    Bird(BirdControl),
    Frr(FrrVty),
}

impl RibReader {
    /// Every path in the RIB for exactly `prefix` (`10.255.0.10/32`); empty when there
    /// is none. A path's [`RibPath::protocol`] names the session it came from: BIRD's
    /// protocol name (`site_a`), FRR's neighbor address (`10.0.1.2`).
    pub fn routes(&mut self, prefix: &str) -> anyhow::Result<Vec<RibPath>> {
        match self {
            RibReader::Bird(bird) => bird.routes(prefix),
            RibReader::Frr(frr) => frr.routes(prefix),
        }
    }

    /// The state of the BGP session `session` (as [`RibPath::protocol`] names it):
    /// `Established` when up, in both daemons' words otherwise.
    pub fn session_state(&mut self, session: &str) -> anyhow::Result<String> {
        match self {
            RibReader::Bird(bird) => bird.protocol_info(session),
            RibReader::Frr(frr) => frr.session_state(session),
        }
    }
}

/// FRR as the router: `zebra` (the FIB) and `bgpd` inside a namespace, each with its pid
/// file, log and vty socket in one directory and talking to each other on a zserv socket
/// there, so nothing touches the host's FRR (`/etc/frr`, `/run/frr`). No vty TCP ports
/// (`-P 0`); bgpd listens on port 179 inside the namespace. Both killed on drop (bgpd
/// first).
pub struct Frr {
    /// Held to be killed on drop, bgpd before zebra (fields drop in this order).
    _bgpd: Process,
    _zebra: Process,
    dir: PathBuf,
}

impl Frr {
    /// Writes `bgpd_conf` to `dir/frr/bgpd.conf` (an empty `zebra.conf` beside it), runs
    /// zebra, then bgpd, inside `ns` as the `frr` user; returns once bgpd's vty answers.
    ///
    /// # Errors
    /// When FRR is missing, a daemon exits at start, bgpd refuses a line of the config
    /// (`% ...` or `Config Failed` in its output), or its vty does not answer in 10 s.
    pub fn start(ns: &NetNs, dir: &Path, bgpd_conf: &str) -> anyhow::Result<Frr> {
        if let Some(why) = frr_unavailable() {
            bail!("{why}");
        }
        let (uid, gid) = frr_ids().context("no frr user")?;
        let dir = dir.join("frr");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("zebra.conf"), "")?;
        std::fs::write(dir.join("bgpd.conf"), bgpd_conf)?;
        // The daemons run as frr: their pid files and sockets go here.
        for file in ["", "zebra.conf", "bgpd.conf"] {
            std::os::unix::fs::chown(dir.join(file), Some(uid), Some(gid))
                .with_context(|| format!("chown frr {}", dir.display()))?;
        }
        let daemon = |program: &str, name: &str| -> anyhow::Result<Process> {
            let out = std::fs::File::create(dir.join(format!("{name}.out")))?;
            let mut command = ns.command(program);
            command
                .arg("-f")
                .arg(dir.join(format!("{name}.conf")))
                .arg("-i")
                .arg(dir.join(format!("{name}.pid")))
                .arg("-z")
                .arg(dir.join("zserv.api"))
                .arg("--vty_socket")
                .arg(&dir)
                .args(["-P", "0", "-u", "frr", "-g", "frr", "--log"])
                .arg(format!(
                    "file:{}",
                    dir.join(format!("{name}.log")).display()
                ))
                .stdout(Stdio::from(out.try_clone()?))
                .stderr(Stdio::from(out));
            let child = command
                .spawn()
                .with_context(|| format!("starting {program}"))?;
            Ok(Process {
                child,
                ready: Value::Null,
                name: name.to_owned(),
            })
        };
        let mut zebra = daemon(FRR_ZEBRA, "zebra")?;
        wait_for(&dir.join("zserv.api"), &mut zebra, &dir)?;
        let mut bgpd = daemon(FRR_BGPD, "bgpd")?;
        wait_for(&dir.join("bgpd.vty"), &mut bgpd, &dir)?;
        let frr = Frr {
            _bgpd: bgpd,
            _zebra: zebra,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(error) = frr.vty().command("show bgp summary json") {
            if Instant::now() >= deadline {
                return Err(
                    error.context(format!("bgpd's vty did not answer in 10 s\n{}", frr.log()))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = std::fs::read_to_string(frr.dir.join("bgpd.out")).unwrap_or_default();
        let refused: Vec<&str> = out
            .lines()
            .filter(|l| {
                l.starts_with('%') || l.contains("Config Failed") || l.contains("Unknown command")
            })
            .collect();
        if !refused.is_empty() {
            bail!(
                "bgpd refused lines of its config:\n{}\n--- bgpd.conf ---\n{bgpd_conf}",
                refused.join("\n")
            );
        }
        Ok(frr)
    }

    /// `vtysh` on this FRR's vty sockets.
    pub fn vty(&self) -> FrrVty {
        FrrVty {
            dir: self.dir.clone(),
        }
    }

    /// bgpd's and zebra's logs and outputs so far (for failure messages).
    pub fn log(&self) -> String {
        ["bgpd.out", "bgpd.log", "zebra.out", "zebra.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {f} ---\n{}",
                    std::fs::read_to_string(self.dir.join(f)).unwrap_or_default()
                )
            })
            .collect()
    }
}

/// Waits up to 10 s for `daemon` to create `socket`.
fn wait_for(socket: &Path, daemon: &mut Process, dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if !daemon.is_running() {
            bail!(
                "{} exited at start:\n{}",
                daemon.name,
                std::fs::read_to_string(dir.join(format!("{}.out", daemon.name)))
                    .unwrap_or_default()
            );
        }
        if Instant::now() >= deadline {
            bail!("{} made no {} in 10 s", daemon.name, socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `vtysh --vty_socket DIR -d bgpd -c COMMAND`: one FRR's bgpd, found by its vty socket
/// directory (a path: usable from any namespace).
#[derive(Clone, Debug)]
pub struct FrrVty {
    dir: PathBuf,
}

impl FrrVty {
    /// Runs one bgpd command and returns what vtysh printed.
    ///
    /// # Errors
    /// When vtysh fails (bgpd not answering) or prints a `%` error line.
    pub fn command(&self, command: &str) -> anyhow::Result<String> {
        let out = Command::new("vtysh")
            .arg("--vty_socket")
            .arg(&self.dir)
            .args(["-d", "bgpd", "-c", command])
            .stdin(Stdio::null())
            .output()
            .context("running vtysh")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() || text.starts_with('%') {
            bail!(
                "vtysh -c {command:?}: {}{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(text)
    }

    fn json(&self, command: &str) -> anyhow::Result<Value> {
        let text = self.command(&format!("{command} json"))?;
        serde_json::from_str(&text).with_context(|| format!("{command} json printed {text:?}"))
    }

    /// Every path in bgpd's RIB for exactly `prefix` (`show bgp ipv4 unicast PREFIX
    /// json`); empty when it has none.
    pub fn routes(&self, prefix: &str) -> anyhow::Result<Vec<RibPath>> {
        Ok(parse_frr_routes(
            &self.json(&format!("show bgp ipv4 unicast {prefix}"))?,
        ))
    }

    /// The `bgpState` of neighbor `address` (`Established`, `Active`, `Connect`...).
    pub fn session_state(&self, address: &str) -> anyhow::Result<String> {
        let json = self.json(&format!("show bgp neighbors {address}"))?;
        json[address]["bgpState"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no bgpState of {address} in {json}"))
    }
}

/// The paths of `show bgp ipv4 unicast PREFIX json` (FRR 8): `{}` when there are none.
/// [`RibPath::protocol`] is the neighbor it came from (`peer.peerId`); `via` is the next
/// hop bgpd uses (`nexthops[].used`, else the first), with its interface when FRR names
/// one.
pub fn parse_frr_routes(json: &Value) -> Vec<RibPath> {
    let prefix = json["prefix"].as_str().unwrap_or_default();
    let Some(paths) = json["paths"].as_array() else {
        return Vec::new();
    };
    paths
        .iter()
        .map(|path| {
            let nexthops = path["nexthops"].as_array().cloned().unwrap_or_default();
            let used = nexthops
                .iter()
                .find(|n| n["used"].as_bool() == Some(true))
                .or(nexthops.first());
            let ip = |v: &Value| v["ip"].as_str().and_then(|a| a.parse().ok());
            RibPath {
                prefix: prefix.to_owned(),
                protocol: path["peer"]["peerId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                best: path["bestpath"]["overall"].as_bool() == Some(true),
                via: used.and_then(ip),
                interface: used
                    .and_then(|n| n["interface"].as_str())
                    .map(str::to_owned),
                next_hop: nexthops.first().and_then(ip),
                local_pref: path["locPrf"].as_u64().and_then(|p| u32::try_from(p).ok()),
                communities: path["community"]["list"]
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .filter_map(|c| c.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
                as_path: path["aspath"]["segments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|s| s["list"].as_array().cloned().unwrap_or_default())
                    .filter_map(|a| a.as_u64().and_then(|a| u32::try_from(a).ok()))
                    .collect(),
            }
        })
        .collect()
}

/// One iBGP or eBGP neighbor of the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BirdNeighbor {
    /// The BGP protocol's name in BIRD (`site_a`): letters, digits and `_`.
    pub name: String,
    pub address: IpAddr,
    pub asn: u32,
    /// The router's own address on the link to the neighbor.
    pub local_address: IpAddr,
    /// A route reflector client (iBGP): routes learnt from it are reflected to the others.
    pub rr_client: bool,
    /// `bgp_local_pref` set on every route imported from it (BIRD's default is 100).
    pub local_pref: Option<u32>,
    /// Wait for the neighbor to connect (a speaker that connects out and does not listen).
    pub passive: bool,
    /// The neighbor's BGP port when it is not 179 (an agent's gobgpd listening on a high
    /// port).
    pub port: Option<u16>,
    /// BIRD's `connect delay time` and `connect retry time` (5 s and 120 s by default):
    /// how soon it connects after starting or losing the session, and how often it
    /// tries again while the neighbor refuses.
    pub connect_seconds: Option<u32>,
    pub hold_time_seconds: u32,
    pub keepalive_seconds: u32,
    /// Send the neighbor every route (reflected ones too); `false` sends it none.
    pub export: bool,
}

/// The router's configuration: IPv4 unicast only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BirdConfig {
    pub router_id: Ipv4Addr,
    pub asn: u32,
    pub neighbors: Vec<BirdNeighbor>,
    /// Where BIRD logs.
    pub log: PathBuf,
}

impl BirdConfig {
    /// The `bird.conf` text.
    ///
    /// # Guarantees
    /// - Every neighbor is a directly connected session (`direct`: its next hop must be
    ///   on a shared link, no IGP needed), IPv4 unicast, importing everything with its
    ///   `local_pref` and exporting everything or nothing (`export`).
    /// - `protocol kernel` exports the best route of each prefix learnt over BGP into
    ///   the namespace's FIB (and imports nothing), so packets follow BGP's choice; a
    ///   withdrawn route leaves the FIB at once.
    pub fn render(&self) -> String {
        let mut text = format!(
            "# Rendered by fedingress-tests (tests/src/bgp.rs).\nrouter id {};\nlog \"{}\" all;\n\
             protocol device {{ scan time 10; }}\n\
             protocol kernel {{\n  ipv4 {{ import none; export where source = RTS_BGP; }};\n}}\n",
            self.router_id,
            self.log.display(),
        );
        for n in &self.neighbors {
            let import = match n.local_pref {
                Some(pref) => format!("filter {{ bgp_local_pref = {pref}; accept; }}"),
                None => "all".to_owned(),
            };
            // Infallible: writing to a String.
            let _ = write!(
                text,
                "protocol bgp {name} {{\n  local {local} as {asn};\n  neighbor {address}{port} as {peer_asn};\n  direct;\n{rr}{passive}{connect}  hold time {hold};\n  keepalive time {keepalive};\n  ipv4 {{ import {import}; export {export}; }};\n}}\n",
                name = n.name,
                local = n.local_address,
                asn = self.asn,
                address = n.address,
                port = n.port.map(|p| format!(" port {p}")).unwrap_or_default(),
                peer_asn = n.asn,
                rr = if n.rr_client { "  rr client;\n" } else { "" },
                passive = if n.passive { "  passive on;\n" } else { "" },
                connect = n
                    .connect_seconds
                    .map(|t| format!("  connect delay time {t};\n  connect retry time {t};\n"))
                    .unwrap_or_default(),
                hold = n.hold_time_seconds,
                keepalive = n.keepalive_seconds,
                export = if n.export { "all" } else { "none" },
            );
        }
        text
    }
}

/// A running `bird` inside a namespace, with its config, log and control socket in one
/// directory; killed on drop.
pub struct Bird {
    process: Process,
    socket: PathBuf,
    log: PathBuf,
}

impl Bird {
    /// Writes `config` to `dir/bird.conf` and runs `bird -f` inside `ns` with its
    /// control socket at `dir/bird.ctl`; returns once the socket answers.
    ///
    /// # Errors
    /// When bird exits (a config error: its stderr went to ours) or its socket does not
    /// answer within 10 s.
    pub fn start(ns: &NetNs, dir: &Path, config: &BirdConfig) -> anyhow::Result<Bird> {
        let conf = dir.join("bird.conf");
        std::fs::write(&conf, config.render())
            .with_context(|| format!("writing {}", conf.display()))?;
        let socket = dir.join("bird.ctl");
        let mut command = ns.command("bird");
        command
            .arg("-f")
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&socket)
            .arg("-P")
            .arg(dir.join("bird.pid"));
        let mut process = Process::spawn(command, "bird")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if !process.is_running() {
                bail!("bird exited at start (config {})", conf.display());
            }
            match BirdControl::connect(&socket) {
                Ok(_) => break,
                Err(error) if Instant::now() >= deadline => {
                    return Err(error.context("bird's control socket did not answer in 10 s"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        Ok(Bird {
            process,
            socket,
            log: config.log.clone(),
        })
    }

    /// A new connection to the control socket (a socket file: usable from any
    /// namespace).
    pub fn control(&self) -> anyhow::Result<BirdControl> {
        BirdControl::connect(&self.socket)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// BIRD's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// A connection to BIRD's control socket, speaking the protocol `birdc` speaks: a
/// command per line; each reply line starts with a 4-digit code and `-` (more follows)
/// or ` ` (the last line), or with a space (continuing the previous code's text).
pub struct BirdControl {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// A reply that BIRD marked as an error (codes 8xxx and 9xxx), e.g. `8001 Network not
/// found` for a route that is not in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirdError {
    pub code: u16,
    pub message: String,
}

impl std::fmt::Display for BirdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bird answered {} {}", self.code, self.message)
    }
}

impl std::error::Error for BirdError {}

impl BirdControl {
    /// Connects and reads the greeting (`0001 BIRD 2.x ready.`).
    pub fn connect(socket: &Path) -> anyhow::Result<BirdControl> {
        let stream = UnixStream::connect(socket)
            .with_context(|| format!("connecting to bird's socket {}", socket.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let writer = stream.try_clone()?;
        let mut control = BirdControl {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = control.read_reply()?;
        if !greeting.starts_with("BIRD ") {
            bail!("unexpected greeting from bird: {greeting:?}");
        }
        Ok(control)
    }

    /// Sends `command` (e.g. `show route all 10.0.0.1/32`) and returns the reply text as
    /// `birdc` prints it (codes and continuation marks removed, lines kept).
    ///
    /// # Errors
    /// A [`BirdError`] (downcast it) when BIRD answers with an error code; I/O errors.
    pub fn command(&mut self, command: &str) -> anyhow::Result<String> {
        self.writer
            .write_all(format!("{command}\n").as_bytes())
            .with_context(|| format!("sending {command:?} to bird"))?;
        self.read_reply()
            .with_context(|| format!("bird's answer to {command:?}"))
    }

    fn read_reply(&mut self) -> anyhow::Result<String> {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("bird closed the control socket");
            }
            let line = line.trim_end_matches('\n');
            let (code, last, rest) = split_reply_line(line);
            if let Some(code) = code
                && code >= 8000
            {
                let error = BirdError {
                    code,
                    message: rest.to_owned(),
                };
                // Errors are one line; keep the connection usable.
                if !last {
                    self.read_reply().ok();
                }
                return Err(error.into());
            }
            // "0000" ends a reply without text of its own.
            if code != Some(0) {
                text.push_str(rest);
                text.push('\n');
            }
            if last {
                return Ok(text);
            }
        }
    }

    /// Every path in the table for exactly `prefix` (`10.255.0.10/32`); empty when the
    /// table has none.
    pub fn routes(&mut self, prefix: &str) -> anyhow::Result<Vec<RibPath>> {
        match self.command(&format!("show route all {prefix}")) {
            Ok(text) => Ok(parse_routes(&text)),
            Err(error)
                if error
                    .downcast_ref::<BirdError>()
                    .is_some_and(|e| e.code == 8001) =>
            {
                Ok(Vec::new())
            }
            Err(error) => Err(error),
        }
    }

    /// The `Info` column of `show protocols NAME`: `Established` for an up BGP session,
    /// `Active`, `Passive`, `Connect`... otherwise.
    pub fn protocol_info(&mut self, name: &str) -> anyhow::Result<String> {
        let text = self.command(&format!("show protocols {name}"))?;
        protocol_info(&text, name).with_context(|| format!("no protocol {name} in {text:?}"))
    }
}

/// `(code, last, text)` of one reply line: `1007-text`, `0000 text`, or ` text` (a
/// continuation, no code).
fn split_reply_line(line: &str) -> (Option<u16>, bool, &str) {
    let bytes = line.as_bytes();
    if bytes.len() >= 5
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && (bytes[4] == b'-' || bytes[4] == b' ')
    {
        let code = line[..4].parse().ok();
        return (code, bytes[4] == b' ', &line[5..]);
    }
    if bytes.len() == 4 && bytes.iter().all(u8::is_ascii_digit) {
        return (line.parse().ok(), true, "");
    }
    (None, false, line.strip_prefix(' ').unwrap_or(line))
}

fn protocol_info(text: &str, name: &str) -> Option<String> {
    // "site_a     BGP        ---        up     14:16:39.844  Established"
    text.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        (words.first() == Some(&name) && words.len() >= 6).then(|| words[5..].join(" "))
    })
}

/// One path of a prefix in a router's table: BIRD's `show route all`, FRR's `show bgp
/// ipv4 unicast PREFIX json`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RibPath {
    pub prefix: String,
    /// The session it was learnt from: BIRD's protocol name in the config, FRR's
    /// neighbor address.
    pub protocol: String,
    /// The best path (BIRD marks it `*`), the one put into the kernel's FIB.
    pub best: bool,
    /// The gateway (`via X on DEV`).
    pub via: Option<IpAddr>,
    pub interface: Option<String>,
    pub next_hop: Option<IpAddr>,
    pub local_pref: Option<u32>,
    /// Standard communities as `ASN:VALUE`.
    pub communities: Vec<String>,
    pub as_path: Vec<u32>,
}

/// The paths in a `show route all` reply (as [`BirdControl::command`] returns it, or as
/// `birdc` prints it).
pub fn parse_routes(text: &str) -> Vec<RibPath> {
    let mut paths: Vec<RibPath> = Vec::new();
    let mut prefix = String::new();
    for line in text.lines() {
        if line.starts_with("Table ") || line.trim().is_empty() || line.starts_with("BIRD ") {
            continue;
        }
        if line.starts_with('\t') {
            let Some(path) = paths.last_mut() else {
                continue;
            };
            attribute(path, line.trim());
            continue;
        }
        // A path header: "PREFIX  TYPE [PROTO TIME (from X)] * (PREF) [ORIGIN]", or
        // without the prefix for the next path of the same prefix.
        let Some(open) = line.find('[') else {
            continue;
        };
        if !line.starts_with(' ') {
            prefix = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
        let inside = &line[open + 1..];
        let close = inside.find(']').unwrap_or(inside.len());
        paths.push(RibPath {
            prefix: prefix.clone(),
            protocol: inside
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned(),
            best: inside[close..]
                .trim_start_matches(']')
                .trim_start()
                .starts_with('*'),
            ..RibPath::default()
        });
    }
    paths
}

fn attribute(path: &mut RibPath, line: &str) {
    if let Some(rest) = line.strip_prefix("via ") {
        let mut words = rest.split_whitespace();
        path.via = words.next().and_then(|w| w.parse().ok());
        if words.next() == Some("on") {
            path.interface = words.next().map(str::to_owned);
        }
    } else if let Some(rest) = line.strip_prefix("BGP.next_hop:") {
        path.next_hop = rest.split_whitespace().next().and_then(|w| w.parse().ok());
    } else if let Some(rest) = line.strip_prefix("BGP.local_pref:") {
        path.local_pref = rest.trim().parse().ok();
    } else if let Some(rest) = line.strip_prefix("BGP.as_path:") {
        path.as_path = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
    } else if let Some(rest) = line.strip_prefix("BGP.community:") {
        // "(65000,101) (65000,7)"
        path.communities = rest
            .split_whitespace()
            .map(|c| {
                c.trim_matches(|ch| ch == '(' || ch == ')')
                    .replace(',', ":")
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `birdc show route all 10.255.0.10/32` of BIRD 2.0.12 with two iBGP paths, the
    /// first preferred by local_pref.
    const TWO_PATHS: &str = "Table master4:
10.255.0.10/32       unicast [site_a 14:16:39.844] * (100) [i]
\tvia 10.0.1.2 on va
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 
\tBGP.next_hop: 10.0.1.2
\tBGP.local_pref: 200
\tBGP.community: (65000,101) (65000,7)
                     unicast [site_b 14:16:41.002] (100) [i]
\tvia 10.0.2.2 on vb
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 65010 65020
\tBGP.next_hop: 10.0.2.2
\tBGP.local_pref: 100
\tBGP.community: (65000,102)
";

    #[test]
    fn two_paths_parse_with_best_next_hops_and_communities() {
        let paths = parse_routes(TWO_PATHS);
        assert_eq!(paths.len(), 2);
        let (a, b) = (&paths[0], &paths[1]);
        assert_eq!(a.prefix, "10.255.0.10/32");
        assert_eq!(b.prefix, "10.255.0.10/32");
        assert_eq!((a.protocol.as_str(), a.best), ("site_a", true));
        assert_eq!((b.protocol.as_str(), b.best), ("site_b", false));
        assert_eq!(a.via, Some("10.0.1.2".parse().unwrap()));
        assert_eq!(a.interface.as_deref(), Some("va"));
        assert_eq!(a.next_hop, Some("10.0.1.2".parse().unwrap()));
        assert_eq!(b.next_hop, Some("10.0.2.2".parse().unwrap()));
        assert_eq!((a.local_pref, b.local_pref), (Some(200), Some(100)));
        assert_eq!(a.communities, ["65000:101", "65000:7"]);
        assert_eq!(b.communities, ["65000:102"]);
        assert!(a.as_path.is_empty());
        assert_eq!(b.as_path, [65010, 65020]);
    }

    /// `vtysh -c 'show bgp ipv4 unicast 10.255.0.10/32 json'` of FRR 8.4.4 in the
    /// anycast lab: site-b's path, then site-a's, best by local preference.
    const FRR_TWO_PATHS: &str = r#"{
  "prefix":"10.255.0.10/32",
  "version":1,
  "paths":[
    {
      "aspath":{
        "string":"Local",
        "segments":[
        ],
        "length":0
      },
      "rxedFromRrClient":true,
      "origin":"IGP",
      "locPrf":100,
      "valid":true,
      "version":1,
      "community":{
        "string":"65000:102",
        "list":[
          "65000:102"
        ]
      },
      "lastUpdate":{
        "epoch":1795846046,
        "string":"Sat Nov 28 06:07:26 2026\n"
      },
      "nexthops":[
        {
          "ip":"10.0.2.2",
          "hostname":"vm",
          "afi":"ipv4",
          "metric":0,
          "accessible":true,
          "used":true
        }
      ],
      "peer":{
        "peerId":"10.0.2.2",
        "routerId":"10.0.2.2",
        "hostname":"vm",
        "type":"internal"
      }
    },
    {
      "aspath":{
        "string":"Local",
        "segments":[
        ],
        "length":0
      },
      "rxedFromRrClient":true,
      "origin":"IGP",
      "locPrf":200,
      "valid":true,
      "version":1,
      "bestpath":{
        "overall":true,
        "selectionReason":"Local Pref"
      },
      "community":{
        "string":"65000:101",
        "list":[
          "65000:101"
        ]
      },
      "lastUpdate":{
        "epoch":1795846046,
        "string":"Sat Nov 28 06:07:26 2026\n"
      },
      "nexthops":[
        {
          "ip":"10.0.1.2",
          "hostname":"vm",
          "afi":"ipv4",
          "metric":0,
          "accessible":true,
          "used":true
        }
      ],
      "peer":{
        "peerId":"10.0.1.2",
        "routerId":"10.0.1.2",
        "hostname":"vm",
        "type":"internal"
      }
    }
  ]
}"#;

    #[test]
    fn frr_paths_parse_with_best_next_hops_and_communities() {
        let paths = parse_frr_routes(&serde_json::from_str(FRR_TWO_PATHS).unwrap());
        assert_eq!(paths.len(), 2);
        let (b, a) = (&paths[0], &paths[1]);
        assert_eq!(a.prefix, "10.255.0.10/32");
        assert_eq!(b.prefix, "10.255.0.10/32");
        assert_eq!((a.protocol.as_str(), a.best), ("10.0.1.2", true));
        assert_eq!((b.protocol.as_str(), b.best), ("10.0.2.2", false));
        assert_eq!(a.via, Some("10.0.1.2".parse().unwrap()));
        assert_eq!(a.next_hop, Some("10.0.1.2".parse().unwrap()));
        assert_eq!(b.next_hop, Some("10.0.2.2".parse().unwrap()));
        assert_eq!((a.local_pref, b.local_pref), (Some(200), Some(100)));
        assert_eq!(a.communities, ["65000:101"]);
        assert_eq!(b.communities, ["65000:102"]);
        assert!(a.as_path.is_empty() && b.as_path.is_empty());
        // No path: FRR prints `{}`.
        assert!(parse_frr_routes(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn reply_lines_split_into_code_and_text() {
        assert_eq!(
            split_reply_line("1007-Table master4:"),
            (Some(1007), false, "Table master4:")
        );
        assert_eq!(
            split_reply_line(" \tvia 10.0.1.2 on va"),
            (None, false, "\tvia 10.0.1.2 on va")
        );
        assert_eq!(
            split_reply_line("8001 Network not found"),
            (Some(8001), true, "Network not found")
        );
        assert_eq!(split_reply_line("0000"), (Some(0), true, ""));
        assert_eq!(split_reply_line("0000 "), (Some(0), true, ""));
    }

    #[test]
    fn protocol_info_is_the_sixth_column_on() {
        let text = "Name       Proto      Table      State  Since         Info\n\
                    site_a     BGP        ---        up     14:16:39.844  Established   \n";
        assert_eq!(
            protocol_info(text, "site_a").as_deref(),
            Some("Established")
        );
        assert_eq!(protocol_info(text, "site_b"), None);
    }

    #[test]
    fn config_has_a_kernel_export_and_rr_clients_with_their_preference() {
        let config = BirdConfig {
            router_id: "10.0.9.1".parse().unwrap(),
            asn: 65000,
            neighbors: vec![BirdNeighbor {
                name: "site_a".into(),
                address: "10.0.1.2".parse().unwrap(),
                asn: 65000,
                local_address: "10.0.1.1".parse().unwrap(),
                rr_client: true,
                local_pref: Some(200),
                passive: true,
                port: None,
                connect_seconds: None,
                hold_time_seconds: 9,
                keepalive_seconds: 3,
                export: true,
            }],
            log: "/tmp/x/bird.log".into(),
        };
        let text = config.render();
        assert!(text.contains("router id 10.0.9.1;"), "{text}");
        assert!(text.contains("export where source = RTS_BGP;"), "{text}");
        assert!(
            text.contains(
                "protocol bgp site_a {\n  local 10.0.1.1 as 65000;\n  neighbor 10.0.1.2 as 65000;\n  direct;\n  rr client;\n  passive on;\n  hold time 9;\n  keepalive time 3;\n  ipv4 { import filter { bgp_local_pref = 200; accept; }; export all; };\n}"
            ),
            "{text}"
        );
    }
}
