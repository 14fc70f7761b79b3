//! `pools:` in process, without root: the agent (the standalone driver wrapped by
//! `vrrp::Pools`) follows the fake hub's plans, and a stand-in for keepalived (a shell
//! script taking keepalived's arguments) accepts or refuses configs, writes its pid
//! file, and on start and on every SIGHUP announces `(<instance>) Entering MASTER
//! STATE` for each instance of the config it reads, as keepalived logs it. What the
//! real keepalived does with the configs is tests/tests/e2e/pools.rs's business.
//!
//! `plans_load_report_and_nack`: a plan with the pool `gold` is Acked, its config
//! written and loaded (SIGHUP), and the reports carry gold MASTER; a plan keepalived
//! refuses is Nacked saying so, and gold stays loaded; a plan with a pool keepalived
//! cannot run is Nacked naming the pool; a plan without pools is Acked and empties the
//! report.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use fedingress_agent::driver::Driver;
use fedingress_agent::hub::{Agent, BackoffPolicy, HubSettings};
use fedingress_agent::vrrp::keepalived::{Keepalived, prepare_pools};
use fedingress_agent::vrrp::pools::{Pools, PoolsSettings};
use fedingress_agent::{Config, Standalone};
use fedingress_api::plan::{
    AgentReport, ClusterPlan, PoolAssignment, PoolPeer, PoolPlan, VrrpReport,
};
use fedingress_proto::{AgentToHub, HubToAgent};
use fedingress_testsupport::gateway::{Conn, FakeHub};

/// keepalived's stand-in: `--config-test -f FILE` refuses a config holding virtual
/// router 13; `-n -l -D -G -P -f CONFIG -p PID -r VRRP_PID` writes PID and announces
/// every instance of CONFIG as MASTER, at start and on SIGHUP.
const KEEPALIVED: &str = r#"#!/bin/sh
if [ "$1" = "--config-test" ]; then
    if grep -q "virtual_router_id 13$" "$3"; then echo "refusing router 13 in $3" >&2; exit 1; fi
    exit 0
fi
config="$7"; pidfile="$9"
announce() {
    for i in $(sed -n 's/^vrrp_instance \(.*\) {$/\1/p' "$config"); do
        echo "Sat Nov 28 08:00:00 2026: ($i) Entering MASTER STATE"
    done
}
trap announce HUP
trap 'exit 0' TERM
echo $$ > "$pidfile"
announce
while true; do sleep 0.05; done
"#;

fn plan(pools: Vec<PoolAssignment>) -> ClusterPlan {
    ClusterPlan {
        pools: Arc::new(PoolPlan {
            pools,
            ..PoolPlan::default()
        }),
        ..ClusterPlan::default()
    }
}

fn gold(id: u8, priority: u8) -> PoolAssignment {
    PoolAssignment {
        name: "gold".into(),
        vips: vec!["10.0.0.100".parse().unwrap()],
        prefix_len: 24,
        virtual_router_id: id,
        members: vec![
            PoolPeer {
                name: "edge-a".into(),
                address: Some("10.0.0.1".parse().unwrap()),
                priority,
            },
            PoolPeer {
                name: "edge-b".into(),
                address: Some("10.0.0.2".parse().unwrap()),
                priority: 140,
            },
        ],
    }
}

fn snapshot(version: u64, plan: &ClusterPlan) -> HubToAgent {
    HubToAgent::Snapshot {
        version,
        digest: plan.digest(),
        plan: plan.clone(),
    }
}

/// The next Ack (`Ok`) or Nack (`Err` with its error) of `version`.
async fn answer(conn: &mut Conn, version: u64) -> Result<(), String> {
    conn.expect("Ack or Nack", |m| match m {
        AgentToHub::Ack { version: v } if v == version => Some(Ok(())),
        AgentToHub::Nack {
            version: v, error, ..
        } if v == version => Some(Err(error)),
        _ => None,
    })
    .await
}

/// The next report whose `vrrp` is `expected`.
async fn reported(conn: &mut Conn, expected: &[(&str, &str)]) -> AgentReport {
    let expected: Vec<VrrpReport> = expected
        .iter()
        .map(|(pool, state)| VrrpReport {
            pool: (*pool).to_owned(),
            state: (*state).to_owned(),
        })
        .collect();
    conn.expect("a report with the expected VRRP states", |m| match m {
        AgentToHub::Report(report) if report.vrrp == expected => Some(report),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_load_report_and_nack() {
    let dir = tempfile::tempdir().unwrap();
    let keepalived = dir.path().join("keepalived");
    std::fs::write(&keepalived, KEEPALIVED).unwrap();
    std::fs::set_permissions(&keepalived, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("token"), "t0ken\n").unwrap();
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let config = Config::from_yaml(&format!(
        "\
hub: {{address: 'http://{hub}'}}
cluster: eu-west
tokenFile: {dir}/token
driver: standalone
listen: [{{bind: 127.0.0.1}}]
stateDir: {dir}/state
admin: 127.0.0.1:9901
member: {{name: edge-a, address: 10.0.0.1}}
pools:
  interface: eth0
  keepalived: {{command: '{keepalived}'}}
",
        hub = hub.addr,
        dir = dir.path().display(),
        keepalived = keepalived.display(),
    ))
    .unwrap();
    let prepared = prepare_pools(&config, config.pools.as_ref().unwrap()).unwrap();
    let files = prepared.files.clone();
    let keepalived = Keepalived::start(prepared);
    let pools = Pools::new(
        Arc::new(Standalone::new(&config)),
        Arc::clone(&keepalived),
        PoolsSettings::from_config(&config).unwrap().unwrap(),
    );
    let mut settings = HubSettings::from_config(&config);
    settings.first_address = Some(0);
    settings.report_interval = Duration::from_secs(60);
    settings.backoff = BackoffPolicy::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(
        Agent::new(settings, Arc::clone(&pools) as Arc<dyn Driver>).run(async {
            let _ = stopped.await;
        }),
    );

    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.member, "edge-a");
    conn.send(HubToAgent::Welcome {
        heartbeat_interval_ms: 1000,
        lease_ms: 10_000,
        provider: None,
        cordoned: false,
    });

    // gold: Acked, written, loaded, reported.
    conn.send(snapshot(1, &plan(vec![gold(7, 150)])));
    assert_eq!(answer(&mut conn, 1).await, Ok(()));
    let written = std::fs::read_to_string(&files.config).unwrap();
    for line in [
        "vrrp_instance fedingress_gold {",
        "    virtual_router_id 7",
        "    priority 150",
        "    unicast_src_ip 10.0.0.1",
        "        10.0.0.2",
        "        10.0.0.100/24",
    ] {
        assert!(written.contains(line), "{line:?} not in:\n{written}");
    }
    reported(&mut conn, &[("gold", "MASTER")]).await;

    // A config keepalived refuses: Nacked, nothing loaded, gold runs on.
    conn.send(snapshot(2, &plan(vec![gold(13, 150)])));
    let error = answer(&mut conn, 2).await.unwrap_err();
    assert!(
        error.starts_with(
            "pools: keepalived did not take the config rendered from the plan's pools, and runs the pools it had"
        ) && error.contains("refusing router 13"),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&files.config).unwrap(), written);
    assert_eq!(
        pools.report(&ClusterPlan::default()).vrrp,
        [VrrpReport {
            pool: "gold".into(),
            state: "MASTER".into()
        }]
    );

    // A pool keepalived cannot run: left out, Nacked naming it.
    conn.send(snapshot(3, &plan(vec![gold(7, 0)])));
    let error = answer(&mut conn, 3).await.unwrap_err();
    assert_eq!(
        error,
        "pools: left out, keepalived cannot run them: gold: this member's priority 0 is outside 1-254"
    );
    reported(&mut conn, &[]).await;

    // No pools: Acked, and the config has no instance.
    conn.send(snapshot(4, &plan(Vec::new())));
    assert_eq!(answer(&mut conn, 4).await, Ok(()));
    assert!(
        !std::fs::read_to_string(&files.config)
            .unwrap()
            .contains("vrrp_instance")
    );

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), agent)
        .await
        .unwrap()
        .unwrap();
    keepalived.stop().await;
}
