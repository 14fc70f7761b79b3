#![allow(clippy::unwrap_used)]
mod common;
use common::*;

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn dnsperf_sanity() {
    let (snapshot, _) = snapshot();
    let dns = start(snapshot, vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let queries = dir.path().join("q");
    std::fs::write(&queries, format!("geo.{ZONE} A\nrr.{ZONE} A\nweighted.{ZONE} A\nv4only.{ZONE} AAAA\n_mysql._tcp.svc.{ZONE} SRV\n")).unwrap();
    for extra in [&[][..], &["-E", "8:0001180cc63371"][..]] {
        let out = tokio::process::Command::new("dnsperf")
            .args([
                "-s",
                "127.0.0.1",
                "-p",
                &dns.addr.port().to_string(),
                "-d",
                queries.to_str().unwrap(),
                "-l",
                "8",
                "-c",
                "4",
                "-q",
                "200",
            ])
            .args(extra)
            .output()
            .await
            .unwrap();
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }
    println!("{:?}", dns.server.stats());
}
