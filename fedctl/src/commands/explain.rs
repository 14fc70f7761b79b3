//! `fedctl explain INGRESS --client IP`: the routing decision the embedded DNS server
//! makes for that client, from the snapshot it serves (the FederatedIngress `explain`
//! subresource): where the client is, the strategy, the answer, and why each cluster is
//! in it or not, and per configured DNS provider which of its records that client gets.

use std::fmt::Write as _;

use serde_json::Value;

use crate::Ctx;
use crate::cli::{ExplainArgs, Output};
use crate::client::ingress_path;
use crate::render::{Table, print_value};

pub async fn run(ctx: &Ctx, args: ExplainArgs) -> anyhow::Result<()> {
    let api = ctx.api()?;
    let namespace = ctx.namespace();
    let path = format!(
        "{}/explain",
        ingress_path(Some(&namespace), Some(&args.ingress))
    );
    let client = args.client.to_string();
    let value = api.get(&path, &[("client", &client)]).await?;
    match ctx.global.output {
        Output::Table => print!("{}", explain_text(&value)),
        output => print_value(output, &value)?,
    }
    Ok(())
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// Where the client was placed, in words.
fn location_text(located: &Value) -> String {
    let place = &located["location"];
    let region = place["region"].as_str().unwrap_or("?");
    let coordinates = match (number(&place["latitude"]), number(&place["longitude"])) {
        (Some(lat), Some(lon)) => format!(" ({lat:.2}, {lon:.2})"),
        _ => String::new(),
    };
    let source = &located["source"];
    let how = match source["type"].as_str() {
        Some("Table") => format!(
            "location table entry {}",
            source["cidr"].as_str().unwrap_or("?")
        ),
        Some("Mmdb") => format!(
            "MaxMind database network {}",
            source["network"].as_str().unwrap_or("?")
        ),
        Some("Default") => "no table entry: the default location".into(),
        Some(other) => other.to_string(),
        None => "?".into(),
    };
    format!("{region}{coordinates}, from the {how}")
}

/// The explanation for people.
pub fn explain_text(value: &Value) -> String {
    let mut out = String::new();
    line(
        &mut out,
        "Ingress",
        format!(
            "{} ({})",
            value["ingress"].as_str().unwrap_or("?"),
            value["dnsName"].as_str().unwrap_or("?")
        ),
    );
    line(
        &mut out,
        "Client",
        format!(
            "{} in {}",
            value["client"].as_str().unwrap_or("(default location)"),
            location_text(&value["location"])
        ),
    );
    line(
        &mut out,
        "Strategy",
        value["strategy"].as_str().unwrap_or("?").to_string(),
    );
    let anycast = value["answer"]["detail"]["type"].as_str() == Some("Addresses");
    line(&mut out, "Answer", answer_text(&value["answer"], anycast));
    // SRV answers of named L4 rules: where each rule is served (its own load balancer
    // where the cluster has one).
    for service in value["answer"]["srv"].as_array().into_iter().flatten() {
        line(&mut out, "SRV", srv_text(service));
    }
    line(
        &mut out,
        "Why",
        value["summary"].as_str().unwrap_or("").to_string(),
    );
    if anycast {
        for text in anycast_lines(value) {
            line(&mut out, "Anycast", text);
        }
    }
    // Within each cluster with IngressPools: the pool that serves it, and why.
    for binding in value["pools"].as_array().into_iter().flatten() {
        line(&mut out, "Pool", pool_text(binding));
    }
    // The configured DNS providers (Route53, Cloud DNS) that hold this name: which of
    // their records the client would get, as that provider chooses.
    for provider in value["providers"].as_array().into_iter().flatten() {
        line(&mut out, "Provider", provider_text(provider));
    }
    let table = reasons_table(value, anycast);
    if !table.is_empty() {
        out.push('\n');
        out.push_str(&table.render());
    }
    out
}

/// `eu-west: gold (leaving silver): moved from pool silver: it was saturated (95% utilized)`.
fn pool_text(binding: &Value) -> String {
    let cluster = binding["cluster"].as_str().unwrap_or("?");
    let pool = binding["pool"].as_str().unwrap_or("(no pool)");
    let leaving = binding["previousPool"]
        .as_str()
        .map(|p| format!(" (leaving {p})"))
        .unwrap_or_default();
    let reason = binding["reason"].as_str().unwrap_or_default();
    if reason.is_empty() {
        format!("{cluster}: {pool}{leaving}")
    } else {
        format!("{cluster}: {pool}{leaving}: {reason}")
    }
}

/// One `Name:    text` line of the explanation.
fn line(out: &mut String, name: &str, text: String) {
    let _ = writeln!(out, "{:<10}{text}", format!("{name}:"));
}

/// The strings in `value`, an array (none if it is not one).
fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The answer: the anycast addresses, or the clusters and their records.
fn answer_text(answer: &Value, anycast: bool) -> String {
    let clusters = strings(&answer["clusters"]);
    let records = strings(&answer["records"]);
    if anycast {
        let addresses = strings(&answer["detail"]["value"]);
        format!("{} (anycast)", addresses.join(", "))
    } else if clusters.is_empty() {
        "no cluster (NODATA)".into()
    } else if records.is_empty() {
        clusters.join(", ")
    } else {
        format!("{} → {}", clusters.join(", "), records.join(", "))
    }
}

/// One named L4 rule's SRV answer: its name and records.
fn srv_text(service: &Value) -> String {
    let records = strings(&service["records"]);
    format!(
        "{} → {}",
        service["name"].as_str().unwrap_or("?"),
        if records.is_empty() {
            "no records".to_string()
        } else {
            records.join(", ")
        }
    )
}

/// One DNS provider's answer for the client, and whether it is synced.
fn provider_text(provider: &Value) -> String {
    let mut text = format!(
        "{} ({}): {}",
        provider["name"].as_str().unwrap_or("?"),
        provider["type"].as_str().unwrap_or("?"),
        provider["answer"].as_str().unwrap_or("?")
    );
    if !provider["synced"].as_bool().unwrap_or(false) {
        match provider["message"].as_str().filter(|m| !m.is_empty()) {
            Some(message) => {
                let _ = write!(text, " [not synced: {message}]");
            }
            None => text.push_str(" [not synced]"),
        }
    }
    text
}

/// Why each cluster is in the answer or not, with the columns (distance, RTT, weight,
/// load) that some reason has.
fn reasons_table(value: &Value, anycast: bool) -> Table {
    let reasons: Vec<&Value> = value["reasons"].as_array().into_iter().flatten().collect();
    let has = |key: &str| reasons.iter().any(|r| !r[key].is_null());
    // Anycast: "in the answer" means announcing the addresses.
    let mut headers = vec!["CLUSTER", if anycast { "ANNOUNCES" } else { "ANSWERED" }];
    let extra: Vec<(&str, &str)> = [
        ("distanceKm", "DISTANCE"),
        ("rttMs", "RTT"),
        ("weight", "WEIGHT"),
        ("load", "LOAD"),
    ]
    .into_iter()
    .filter(|(key, _)| has(key))
    .collect();
    headers.extend(extra.iter().map(|(_, header)| *header));
    headers.push("DETAIL");
    let mut table = Table::new(&headers);
    for reason in &reasons {
        let mut row = vec![
            reason["cluster"].as_str().unwrap_or("?").to_string(),
            if reason["included"].as_bool().unwrap_or(false) {
                "yes".into()
            } else {
                "no".into()
            },
        ];
        for (key, _) in &extra {
            let cell = match (*key, number(&reason[*key])) {
                (_, None) => "-".to_string(),
                ("distanceKm", Some(km)) => format!("{km:.0} km"),
                ("rttMs", Some(ms)) => format!("{ms:.0} ms"),
                ("weight", Some(w)) => format!("{:.0}%", w * 100.0),
                (_, Some(v)) => format!("{v:.1}"),
            };
            row.push(cell);
        }
        row.push(reason["detail"].as_str().unwrap_or("").to_string());
        table.row(row);
    }
    table
}

/// Anycast: per address, the clusters announcing it (`reasons[].anycast`), and that
/// the network carries the client to the nearest of them.
fn anycast_lines(value: &Value) -> Vec<String> {
    let mut by_address: Vec<(String, Vec<String>)> = Vec::new();
    for reason in value["reasons"].as_array().into_iter().flatten() {
        let cluster = reason["cluster"].as_str().unwrap_or("?");
        for route in reason["anycast"].as_array().into_iter().flatten() {
            let address = route["address"].as_str().unwrap_or("?").to_string();
            let index = match by_address.iter().position(|(a, _)| *a == address) {
                Some(index) => index,
                None => {
                    by_address.push((address, Vec::new()));
                    by_address.len() - 1
                }
            };
            if route["announcing"].as_bool().unwrap_or(false) {
                by_address[index].1.push(cluster.to_string());
            }
        }
    }
    by_address
        .into_iter()
        .map(|(address, clusters)| {
            if clusters.is_empty() {
                format!("{address} is announced by no cluster")
            } else {
                format!(
                    "{address} is announced by {}; the network (BGP) carries the client to the nearest of them",
                    clusters.join(", ")
                )
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pool_binding_gets_a_line_with_its_reason() {
        let value = serde_json::json!({
            "ingress": "default/shop",
            "pools": [
                {"cluster": "eu-west", "pool": "gold", "previousPool": "silver",
                 "reason": "moved from pool silver: it was saturated (95% utilized)"},
                {"cluster": "us-east", "pool": null, "previousPool": null,
                 "reason": "unbound: no pool matches the poolSelector"},
            ],
        });
        let text = explain_text(&value);
        assert!(text.contains("Pool:     eu-west: gold (leaving silver): moved from pool silver: it was saturated (95% utilized)"), "{text}");
        assert!(
            text.contains(
                "Pool:     us-east: (no pool): unbound: no pool matches the poolSelector"
            ),
            "{text}"
        );
    }

    #[test]
    fn each_provider_gets_a_line() {
        let value = serde_json::json!({
            "ingress": "default/shop",
            "dnsName": "shop.example.com",
            "client": "10.1.0.1",
            "location": {"location": {"region": "eu", "latitude": 50.0, "longitude": 8.0},
                         "source": {"type": "Table", "cidr": "10.1.0.0/16"}},
            "strategy": "Latency",
            "answer": {"clusters": ["eu-west"], "records": ["192.0.2.1"]},
            "summary": "lowest latency",
            "reasons": [],
            "providers": [
                {"name": "aws", "type": "route53", "synced": true,
                 "answer": "latency record eu-west (eu-west-1) → 192.0.2.1"},
                {"name": "gcp", "type": "clouddns", "synced": false,
                 "message": "zone not found", "answer": "holds no record for this name yet"},
            ],
        });
        let text = explain_text(&value);
        let providers: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("Provider:"))
            .collect();
        assert_eq!(
            providers,
            [
                "Provider: aws (route53): latency record eu-west (eu-west-1) → 192.0.2.1",
                "Provider: gcp (clouddns): holds no record for this name yet [not synced: zone not found]",
            ],
            "{text}"
        );
    }

    #[test]
    fn anycast_says_who_announces_each_address_and_that_bgp_picks() {
        let value = serde_json::json!({
            "ingress": "default/vip",
            "dnsName": "vip.fedingress.test",
            "client": "10.2.0.1",
            "location": {"location": {"region": "us", "latitude": 33.2, "longitude": -80.0},
                         "source": {"type": "Table", "cidr": "10.2.0.0/16"}},
            "strategy": "Anycast",
            "answer": {"clusters": [], "detail": {"type": "Addresses", "value": ["192.0.2.10"]},
                       "records": ["192.0.2.10"]},
            "summary": "Anycast: 192.0.2.10 announced by eu-west; the network (BGP) carries each client to the nearest announcing site",
            "reasons": [
                {"cluster": "eu-west", "included": true, "detail": "healthy: announces 192.0.2.10",
                 "anycast": [{"address": "192.0.2.10", "announcing": true, "reported": true, "reason": "healthy"}]},
                {"cluster": "us-east", "included": false, "detail": "withdrawn: backend echo:9000 has no ready endpoint",
                 "anycast": [{"address": "192.0.2.10", "announcing": false, "reported": false, "reason": "backend echo:9000 has no ready endpoint"}]},
            ],
        });
        let text = explain_text(&value);
        assert!(text.contains("Answer:   192.0.2.10 (anycast)\n"), "{text}");
        assert!(
            text.contains(
                "Anycast:  192.0.2.10 is announced by eu-west; the network (BGP) carries the client to the nearest of them\n"
            ),
            "{text}"
        );
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("CLUSTER"))
            .collect();
        assert!(table[0].contains("ANNOUNCES"), "{text}");
        assert!(
            table[2].contains("no") && table[2].contains("withdrawn: backend"),
            "{text}"
        );
    }
}
