//! `fedctl token create|list|revoke CLUSTER`: the Cluster `token` subresource.
//!
//! `create` prints the token alone on stdout (so `fedctl token create eu-west > token`
//! writes an agent's token file) and what to do with it on stderr.

use chrono::Utc;
use serde_json::json;

use crate::Ctx;
use crate::cli::{Output, TokenCommand};
use crate::client::token_path;
use crate::render::{Table, age, print_value};

pub async fn run(ctx: &Ctx, command: TokenCommand) -> anyhow::Result<()> {
    let api = ctx.api()?;
    match command {
        TokenCommand::Create {
            cluster,
            join,
            ttl_seconds,
        } => {
            let path = match (join, ttl_seconds) {
                (false, _) => token_path(&cluster, None),
                (true, None) => format!("{}?type=join", token_path(&cluster, None)),
                (true, Some(ttl)) => {
                    format!("{}?type=join&ttlSeconds={ttl}", token_path(&cluster, None))
                }
            };
            let token = api.post_empty(&path).await?;
            match ctx.global.output {
                Output::Table => {
                    let id = token["metadata"]["name"].as_str().unwrap_or_default();
                    println!("{}", token["token"].as_str().unwrap_or_default());
                    if join {
                        eprintln!(
                            "join token {id} issued for cluster {cluster}, single use, expires {} (shown only now; the agent reads it from its joinTokenFile)",
                            token["expirationTimestamp"].as_str().unwrap_or("?")
                        );
                    } else {
                        eprintln!(
                            "agent token {id} issued for cluster {cluster} (shown only now; revoke it with `fedctl token revoke {cluster} {id}`)"
                        );
                    }
                }
                output => print_value(output, &token)?,
            }
        }
        TokenCommand::List { cluster } => {
            let list = api.get(&token_path(&cluster, None), &[]).await?;
            match ctx.global.output {
                Output::Table => print!("{}", token_table(&list, Utc::now())),
                output => print_value(output, &list)?,
            }
        }
        TokenCommand::Revoke { cluster, id } => {
            let status = api.delete(&token_path(&cluster, Some(&id))).await?;
            match ctx.global.output {
                Output::Table => println!("credential {id} of cluster {cluster} revoked"),
                output => print_value(output, &json!(status))?,
            }
        }
    }
    Ok(())
}

/// ID, TYPE (token, join, certificate), CREATED, AGE of a `ClusterTokenList`.
pub fn token_table(list: &serde_json::Value, now: chrono::DateTime<Utc>) -> String {
    let mut table = Table::new(&["ID", "TYPE", "CREATED", "AGE"]);
    for item in list["items"].as_array().into_iter().flatten() {
        let created = item["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default();
        let at = fedingress_api::Time::parse(created).ok().map(|t| t.0);
        table.row(vec![
            item["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            item["type"].as_str().unwrap_or("token").to_string(),
            created.to_string(),
            age(at, now),
        ]);
    }
    if table.is_empty() {
        return "No agent tokens.\n".into();
    }
    table.render()
}
