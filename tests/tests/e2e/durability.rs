//! kill -9 and restart: acknowledged writes, resourceVersions and watch history survive.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_tests::start_apiserver;
use futures_util::StreamExt;
use serde_json::{Value, json};

fn ingress(name: &str) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name},
        "spec": {
            "rules": [{"protocol": "TCP", "port": 7000, "backend": {"service": "echo", "port": 7000}}],
            "traffic": {"dnsName": format!("{name}.fedingress.test")}
        }
    })
}

fn collection(base: &str) -> String {
    format!("{base}/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses")
}

/// Reads watch events until `stop` says so (or the timeout passes).
async fn watch_until(
    client: &reqwest::Client,
    url: &str,
    mut stop: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let response = client.get(url).send().await.unwrap();
    assert!(
        response.status().is_success(),
        "watch failed: {}",
        response.status()
    );
    let mut stream = response.bytes_stream();
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("watch event in time")
            .expect("watch stream open")
            .unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            let done = stop(&event);
            events.push(event);
            if done {
                return events;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_and_watch_history_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = start_apiserver(&data, &["--dev"]);
    let base = format!("http://{}", server.addr("api"));
    let client = reqwest::Client::new();

    // Writers hammer the server; it is killed while they are still writing.
    let acked = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let mut writers = Vec::new();
    for writer in 0..16 {
        let (client, base, acked) = (client.clone(), base.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            for n in 0..1000 {
                let name = format!("w{writer}-{n}");
                let Ok(response) = client
                    .post(collection(&base))
                    .json(&ingress(&name))
                    .send()
                    .await
                else {
                    return;
                };
                if response.status() != 201 {
                    return;
                }
                let Ok(body) = response.json::<Value>().await else {
                    return;
                };
                let rv = body["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string();
                acked.lock().unwrap().push((name, rv));
            }
        }));
    }
    fedingress_tests::eventually(Duration::from_secs(30), "200 acknowledged creates", || {
        let n = acked.lock().unwrap().len();
        if n >= 200 {
            Ok(())
        } else {
            Err(format!("{n} so far"))
        }
    });
    let list: Value = client
        .get(collection(&base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let list_rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    server.kill9();
    for writer in writers {
        let _ = writer.await;
    }
    let acked = acked.lock().unwrap().clone();

    let server = start_apiserver(&data, &["--dev"]);
    let base = format!("http://{}", server.addr("api"));
    // Every acknowledged create is there, unchanged but for the status the hub's
    // controller writes (which moves the resourceVersion on).
    for (name, rv) in &acked {
        let object: Value = client
            .get(format!("{}/{name}", collection(&base)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let now: i64 = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            now >= rv.parse::<i64>().unwrap(),
            "{name} lost or went back: {object}"
        );
        assert_eq!(object["spec"]["rules"][0]["port"], 7000, "{name} changed");
    }
    // resourceVersions survive kill -9 exactly: once the controller has settled, kill
    // again and compare every object's resourceVersion.
    let versions = |base: String, client: reqwest::Client| async move {
        let list: Value = client
            .get(collection(&base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["metadata"]["name"].to_string(),
                    i["metadata"]["resourceVersion"].to_string(),
                )
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let mut settled = versions(base.clone(), client.clone()).await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = versions(base.clone(), client.clone()).await;
        if again == settled {
            break;
        }
        settled = again;
    }
    server.kill9();
    let server = start_apiserver(&data, &["--dev"]);
    let base = format!("http://{}", server.addr("api"));
    assert_eq!(
        versions(base.clone(), client.clone()).await,
        settled,
        "resourceVersions changed across kill -9"
    );

    // A watch resumes from the last resourceVersion it saw before the crash: the
    // creates after the list are replayed from on-disk history, in order.
    let url = format!("{}?watch=true&resourceVersion={list_rv}", collection(&base));
    let last_acked: i64 = acked
        .iter()
        .map(|(_, rv)| rv.parse::<i64>().unwrap())
        .max()
        .unwrap();
    let events = watch_until(&client, &url, |event| {
        event["object"]["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<i64>().ok())
            .is_some_and(|rv| rv >= last_acked)
    })
    .await;
    let revisions: Vec<i64> = events
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "events out of order"
    );
    assert!(revisions[0] > list_rv.parse::<i64>().unwrap());

    // Every create after the list is replayed as ADDED (status writes come as MODIFIED).
    let added: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "ADDED")
        .filter_map(|e| e["object"]["metadata"]["name"].as_str())
        .collect();
    let list_rv: i64 = list_rv.parse().unwrap();
    for (name, rv) in &acked {
        if rv.parse::<i64>().unwrap() > list_rv {
            assert!(added.contains(name.as_str()), "{name} not replayed");
        }
    }
    assert!(
        events
            .iter()
            .all(|e| e["type"] == "ADDED" || e["type"] == "MODIFIED")
    );

    // And live changes keep flowing after the replay.
    let url = format!(
        "{}?watch=true&resourceVersion={last_acked}",
        collection(&base)
    );
    let watcher = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            watch_until(&client, &url, |event| {
                event["object"]["metadata"]["name"] == "after-restart"
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = client
        .post(collection(&base))
        .json(&ingress("after-restart"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let events = watcher.await.unwrap();
    assert_eq!(events.last().unwrap()["type"], "ADDED");
}
