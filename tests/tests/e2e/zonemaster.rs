//! The embedded DNS server as a zone checker sees it (issue 11, part 5). Debian's
//! `zonemaster-cli` runs an undelegated test of a zone with three nameservers on
//! 127.0.0.1-3, port 53, listed with glue, served by federation-apiserver; then the same
//! against Knot serving the equivalent static zone on the same addresses. Everything
//! zonemaster reports for ours at NOTICE and above, it also reports for Knot (same level
//! and tag), and Knot's errors and warnings are only those the setup causes: loopback
//! nameserver addresses (ADDRESS01), their missing PTR records (ADDRESS02) and an MNAME
//! on a localhost address (ZONE01). Before the two runs, `dig` asks both the same
//! questions at every address and gets the same answers, each from the address it
//! asked, so the zones are equivalent.
//!
//! Two ways to serve the three addresses: three replicas on one etcd member, each a
//! process on one address (`--replica-name rN --dns-listen 127.0.0.N:53`, one config
//! for all), serving the zone from the DNS state they share, so zonemaster runs only
//! once all three answer the same SOA serial; and one process with its embedded store
//! on the wildcard address `0.0.0.0:53` (against Knot on `0.0.0.0@53`), whose replies
//! must leave from the address each query was sent to.
//!
//! The zone holds no ingress's records: those need a cluster whose agent (and backend)
//! would have to run inside the namespace too.
//!
//! Everything runs inside a network namespace of the test's own with only loopback up
//! (etcd too: its members run under `ip netns exec`): zonemaster's queries to the root
//! servers fail at once and nothing leaves the machine. Every process is stopped by its
//! PID, the namespace removed on drop. Needs root for `ip netns` (skips otherwise,
//! saying why).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_store::etcd_process::{EtcdCluster, EtcdOptions};
use fedingress_tests::netns::NetNs;
use fedingress_tests::{Process, binary, eventually};

const ZONE: &str = "fedingress.test";
/// Nameservers: `ns<i>.fedingress.test` on `127.0.0.<i>:53`.
const NAMESERVERS: u8 = 3;
const START: Duration = Duration::from_secs(30);
/// zonemaster-cli takes about a second here; it is killed after this.
const ZONEMASTER_TIMEOUT_SECONDS: &str = "300";
/// The levels compared.
const LEVELS: [&str; 4] = ["NOTICE", "WARNING", "ERROR", "CRITICAL"];
/// Errors and warnings the setup itself causes, for ours and Knot alike: nameservers on
/// loopback addresses, no PTR for them, the SOA MNAME on a localhost address.
const SETUP_PROBLEMS: [&str; 3] = [
    "NAMESERVER_IP_PRIVATE_NETWORK",
    "NO_RESPONSE_PTR_QUERY",
    "Z01_MNAME_HAS_LOCALHOST_ADDR",
];

/// Questions asked of every server to show that the zones are the same.
const QUESTIONS: [(&str, &str); 8] = [
    ("fedingress.test", "SOA"),
    ("fedingress.test", "NS"),
    ("fedingress.test", "A"),
    ("ns1.fedingress.test", "A"),
    ("ns2.fedingress.test", "A"),
    ("ns3.fedingress.test", "A"),
    ("ns1.fedingress.test", "AAAA"),
    ("nothing-here.fedingress.test", "A"),
];

fn address(i: u8) -> String {
    format!("127.0.0.{i}")
}

/// How the three nameserver addresses are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listen {
    /// Three replicas on one etcd, each a process on one address
    /// (`--dns-listen 127.0.0.<i>:53`).
    PerAddress,
    /// One process with its embedded store on `0.0.0.0:53` for all three.
    Wildcard,
}

impl Listen {
    /// The `--dns-listen` of each apiserver process.
    fn apiservers(self) -> Vec<String> {
        match self {
            Listen::PerAddress => (1..=NAMESERVERS)
                .map(|i| format!("{}:53", address(i)))
                .collect(),
            Listen::Wildcard => vec!["0.0.0.0:53".into()],
        }
    }

    /// Knot's `server.listen`.
    fn knot(self) -> Vec<String> {
        match self {
            Listen::PerAddress => (1..=NAMESERVERS)
                .map(|i| format!("{}@53", address(i)))
                .collect(),
            Listen::Wildcard => vec!["0.0.0.0@53".into()],
        }
    }
}

/// The apiserver's config: the zone with its SOA defaults (MNAME the first nameserver,
/// RNAME hostmaster.<zone>, refresh 3600, retry 600, expire 604800, minimum 30, TTL
/// 3600). Dev mode listens on loopback only: on the wildcard address, a token file.
fn apiserver_config(listen: Listen, dir: &Path) -> String {
    let auth = match listen {
        Listen::PerAddress => "dev: true\n".to_string(),
        Listen::Wildcard => {
            let tokens = dir.join("tokens.csv");
            std::fs::write(&tokens, "zonemaster-test,admin,1,\"system:masters\"\n").unwrap();
            format!("tokenFile: {}\n", tokens.display())
        }
    };
    let mut nameservers = String::new();
    for i in 1..=NAMESERVERS {
        nameservers.push_str(&format!(
            "    - {{name: ns{i}.{ZONE}, addresses: [{}]}}\n",
            address(i)
        ));
    }
    format!(
        "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\n{auth}dns:\n  listen: 127.0.0.1:0\n  zones:\n  - name: {ZONE}\n    nameservers:\n{nameservers}"
    )
}

/// The same zone for Knot, with the serial ours serves.
fn knot_zone(serial: &str) -> String {
    let mut text = format!(
        "$ORIGIN {ZONE}.\n$TTL 3600\n@ SOA ns1.{ZONE}. hostmaster.{ZONE}. {serial} 3600 600 604800 30\n"
    );
    for i in 1..=NAMESERVERS {
        text.push_str(&format!("@ NS ns{i}.{ZONE}.\n"));
    }
    for i in 1..=NAMESERVERS {
        text.push_str(&format!("ns{i} A {}\n", address(i)));
    }
    text
}

fn knot_config(listen: Listen, dir: &Path) -> String {
    let d = dir.display();
    format!(
        "server:\n    listen: [{}]\n    rundir: \"{d}\"\n    pidfile: \"{d}/knot.pid\"\ncontrol:\n    listen: \"{d}/knot.sock\"\ndatabase:\n    storage: \"{d}/db\"\nlog:\n  - target: stderr\n    any: warning\ntemplate:\n  - id: default\n    storage: \"{d}\"\n    file: \"%s.zone\"\n    zonefile-sync: -1\n    journal-content: none\nzone:\n  - domain: {ZONE}\n",
        listen.knot().join(", ")
    )
}

fn require(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{program} is not installed (scripts/test installs zonemaster-cli, knot and dnsutils)"
    );
}

/// One answer as dig shows it: rcode, header flags, and each section's records sorted.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: String,
    flags: String,
    sections: Vec<(String, BTreeSet<String>)>,
}

/// Asks `server` one question (UDP, no recursion) from inside the namespace.
fn dig(ns: &NetNs, server: &str, name: &str, qtype: &str) -> Result<Answer, String> {
    let out = ns
        .command("dig")
        .args(["+norec", "+time=1", "+tries=1", "+nocookie"])
        .arg(format!("@{server}"))
        .args([name, qtype])
        .output()
        .map_err(|e| format!("running dig: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("dig @{server} {name} {qtype}: {text}"));
    }
    let mut answer = Answer {
        status: String::new(),
        flags: String::new(),
        sections: Vec::new(),
    };
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("status: ") {
            answer.status = rest.split(',').next().unwrap_or_default().to_string();
        } else if let Some(rest) = line.strip_prefix(";; flags: ") {
            answer.flags = rest.split(';').next().unwrap_or_default().to_string();
        } else if let Some(section) = line.strip_prefix(";; ").filter(|l| l.ends_with("SECTION:")) {
            answer.sections.push((section.to_string(), BTreeSet::new()));
        } else if !line.is_empty() && !line.starts_with(';') {
            let record = line.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some((_, records)) = answer.sections.last_mut() {
                records.insert(record);
            }
        }
    }
    if answer.status.is_empty() {
        return Err(format!("dig @{server} {name} {qtype}: no header in {text}"));
    }
    Ok(answer)
}

/// Every [`QUESTIONS`] asked of every nameserver address.
fn answers(ns: &NetNs) -> Vec<(String, Answer)> {
    let mut all = Vec::new();
    for i in 1..=NAMESERVERS {
        for (name, qtype) in QUESTIONS {
            let answer = dig(ns, &address(i), name, qtype).unwrap();
            all.push((format!("@{} {name} {qtype}", address(i)), answer));
        }
    }
    all
}

/// The zone's SOA serial as `server` answers it.
fn serial(ns: &NetNs, server: &str) -> Result<String, String> {
    let answer = dig(ns, server, ZONE, "SOA")?;
    answer
        .sections
        .iter()
        .find(|(name, _)| name == "ANSWER SECTION:")
        .and_then(|(_, records)| records.iter().next())
        .and_then(|soa| soa.split(' ').nth(6).map(str::to_string))
        .ok_or_else(|| format!("@{server}: no SOA in {answer:?}"))
}

/// Waits until every nameserver address answers the zone's SOA, all with the same
/// serial (replicas serve the state they share once each has read it); returns it.
fn wait_serving(ns: &NetNs, what: &str) -> String {
    eventually(
        START,
        &format!("{what} answering one SOA serial on every address"),
        || {
            let serials = (1..=NAMESERVERS)
                .map(|i| serial(ns, &address(i)))
                .collect::<Result<Vec<_>, _>>()?;
            match serials.iter().collect::<BTreeSet<_>>().len() {
                1 => Ok(serials[0].clone()),
                _ => Err(format!("serials differ: {serials:?}")),
            }
        },
    )
}

/// One zonemaster message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Finding {
    level: String,
    tag: String,
    testcase: String,
    args: String,
}

/// Runs zonemaster-cli's undelegated test of the zone with the three nameservers, IPv4
/// only, from inside the namespace; returns what it reports at NOTICE and above.
fn zonemaster(ns: &NetNs) -> Vec<Finding> {
    let mut command = ns.command("timeout");
    command.args([
        ZONEMASTER_TIMEOUT_SECONDS,
        "zonemaster-cli",
        "--no-ipv6",
        "--json",
        "--raw",
        "--no-progress",
        "--level",
        "NOTICE",
    ]);
    for i in 1..=NAMESERVERS {
        command
            .arg("--ns")
            .arg(format!("ns{i}.{ZONE}/{}", address(i)));
    }
    let out = command.arg(ZONE).output().unwrap();
    assert!(
        out.status.success(),
        "zonemaster-cli failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let messages: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "zonemaster-cli --json printed {}: {e}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
    let mut findings: Vec<Finding> = messages
        .iter()
        .map(|m| Finding {
            level: text(&m["level"]),
            tag: text(&m["tag"]),
            testcase: text(&m["testcase"]),
            args: m["args"].to_string(),
        })
        .filter(|f| LEVELS.contains(&f.level.as_str()))
        .collect();
    findings.sort();
    findings
}

/// (level, tag) of every finding.
fn tags(findings: &[Finding]) -> BTreeSet<(String, String)> {
    findings
        .iter()
        .map(|f| (f.level.clone(), f.tag.clone()))
        .collect()
}

fn show(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| format!("  {:8} {:13} {} {}\n", f.level, f.testcase, f.tag, f.args))
        .collect()
}

#[test]
fn zonemaster_reports_nothing_for_three_replicas_beyond_what_it_reports_for_knot() {
    check(Listen::PerAddress);
}

#[test]
fn one_listener_on_the_wildcard_address_serves_three_nameservers_as_knot_does() {
    check(Listen::Wildcard);
}

/// Ours, then Knot, serving the three addresses as `listen` says: the same answers to
/// dig, and nothing from zonemaster for ours that it does not report for Knot.
fn check(listen: Listen) {
    if let Some(why) = NetNs::unavailable() {
        eprintln!("SKIPPED zonemaster test: {why}");
        return;
    }
    for program in ["zonemaster-cli", "knotd", "dig", "timeout"] {
        require(program);
    }
    let apiserver = binary("federation-apiserver");
    // Created first, so dropped last: after every process running inside it.
    let ns = NetNs::create(match listen {
        Listen::PerAddress => "zm-replicas",
        Listen::Wildcard => "zm-wildcard",
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();

    // Ours: replicas on one etcd member in the namespace, or one process with its
    // embedded store; one config, the same zone for all.
    let etcd = (listen == Listen::PerAddress)
        .then(|| EtcdCluster::start_with(EtcdOptions::members(1).wrapper(ns.exec_prefix())));
    let config = dir.path().join("apiserver.yaml");
    std::fs::write(&config, apiserver_config(listen, dir.path())).unwrap();
    let mut apiservers = Vec::new();
    for (i, dns_listen) in (1..).zip(listen.apiservers()) {
        let mut command = ns.command(&apiserver);
        command
            .arg("--config")
            .arg(&config)
            .args(["--dns-listen", &dns_listen]);
        match &etcd {
            Some(etcd) => command
                .args(["--etcd-servers", &etcd.endpoints().join(",")])
                .args(["--replica-name", &format!("r{i}")]),
            None => command.arg("--data-dir").arg(dir.path().join("apiserver")),
        };
        let process =
            Process::start(command, &format!("apiserver on {dns_listen}"), START).unwrap();
        assert_eq!(process.addr("dns"), dns_listen);
        apiservers.push(process);
    }
    let serial = wait_serving(&ns, "apiserver");
    let ours_answers = answers(&ns);
    let ours = zonemaster(&ns);
    for process in apiservers {
        process.terminate(Duration::from_secs(10));
    }
    // After the replicas; SIGKILL by PID.
    drop(etcd);

    // Knot: the same zone, static, on the same addresses.
    let knot_dir = dir.path().join("knot");
    std::fs::create_dir_all(knot_dir.join("db")).unwrap();
    std::fs::write(knot_dir.join(format!("{ZONE}.zone")), knot_zone(&serial)).unwrap();
    std::fs::write(knot_dir.join("knot.conf"), knot_config(listen, &knot_dir)).unwrap();
    let mut command = ns.command("knotd");
    command.arg("-c").arg(knot_dir.join("knot.conf"));
    let knot = Process::spawn(command, "knotd").unwrap();
    wait_serving(&ns, "knotd");
    let knot_answers = answers(&ns);
    let theirs = zonemaster(&ns);
    knot.terminate(Duration::from_secs(10));

    eprintln!(
        "zonemaster-cli on ours ({listen:?}, {} findings):\n{}zonemaster-cli on Knot ({} findings):\n{}",
        ours.len(),
        show(&ours),
        theirs.len(),
        show(&theirs)
    );
    for ((question, ours), (_, knot)) in ours_answers.iter().zip(&knot_answers) {
        assert_eq!(ours, knot, "{question}: ours and Knot answer differently");
    }
    let extra: BTreeSet<_> = tags(&ours).difference(&tags(&theirs)).cloned().collect();
    assert!(
        extra.is_empty(),
        "zonemaster reports for ours ({listen:?}) but not for Knot: {extra:?}"
    );
    let problems: BTreeSet<_> = tags(&theirs)
        .into_iter()
        .filter(|(level, tag)| level != "NOTICE" && !SETUP_PROBLEMS.contains(&tag.as_str()))
        .collect();
    assert!(
        problems.is_empty(),
        "zonemaster reports errors or warnings for Knot beyond those of the loopback setup (is the comparison sound?): {problems:?}"
    );
    // The setup's own problems are seen: the runs did reach the servers.
    for tag in SETUP_PROBLEMS {
        assert!(
            ours.iter().any(|f| f.tag == tag),
            "zonemaster did not report {tag} for ours ({listen:?})"
        );
    }
}
