//! A member cluster's lifecycle: `join` (Cluster object, agent token, optionally a ready
//! agent config and a wait for the agent; with `--member`, another agent of an existing
//! cluster), `cordon`/`uncordon`, and `unjoin` (drain: cordon and wait one DNS TTL; then
//! revoke the tokens and delete the Cluster).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fedingress_api::{Cluster, FederatedIngress};
use serde_json::{Value, json};

use crate::cli::{Emit, JoinArgs, Output, UnjoinArgs};
use crate::client::{Api, cluster_path, decode, ingress_path, token_path};
use crate::commands::address_texts;
use crate::files::write_private;
use crate::progress::{Step, Stream};
use crate::render::print_value;
use crate::{Ctx, UsageError};

/// How often waits poll the server.
const POLL: Duration = Duration::from_millis(250);

pub async fn join(ctx: &Ctx, args: Box<JoinArgs>) -> anyhow::Result<()> {
    let connection = ctx.connection()?;
    let api = Api::new(&connection)?;
    let name = args.name.clone();
    if let Some(member) = &args.member
        && let Some(problem) = fedingress_api::names::dns1123_label(member).first()
    {
        return Err(UsageError(format!("--member {member:?}: {problem}")).into());
    }
    if args.member.is_some() && matches!(args.emit, Some(Emit::Kubernetes)) {
        return Err(UsageError(
            "--member is for --emit standalone (the kubernetes driver's pool members are provisioned by the agent)".into(),
        )
        .into());
    }
    let mut spec = json!({
        "region": args.region,
        "location": args.location.map(|(latitude, longitude)| json!({"latitude": latitude, "longitude": longitude})),
    });
    if let Some(zone) = &args.zone {
        spec["zone"] = json!(zone);
    }
    if let Some(provider) = &args.provider {
        spec["provider"] = json!(provider.to_ascii_lowercase());
    }
    if args.capacity_rps.is_some() || args.capacity_connections.is_some() {
        let mut capacity = json!({});
        if let Some(rps) = args.capacity_rps {
            capacity["rps"] = json!(rps);
        }
        if let Some(connections) = args.capacity_connections {
            capacity["connections"] = json!(connections);
        }
        spec["capacity"] = capacity;
    }
    let labels: serde_json::Map<String, Value> = args
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let body = json!({
        "apiVersion": fedingress_api::API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    });
    // Check what the agent config needs before writing anything at the hub.
    let emit_plan = match args.emit {
        Some(emit) => Some(Emission::new(emit, &args, &connection)?),
        None => None,
    };
    // A join token (client certificate, mTLS) where the gateway speaks TLS and the agent
    // keeps a state dir of its own; the long-lived token otherwise, or with --token.
    let join_flow = !args.token
        && match &emit_plan {
            Some(Emission::Standalone(plan)) => is_https(&plan.hub_addresses),
            Some(Emission::Kubernetes(_)) => false,
            None => hub_addresses(&args, &connection).is_ok_and(|(a, _)| is_https(&a)),
        };
    if args.join_token_ttl == Some(0) {
        return Err(UsageError("--join-token-ttl must be positive".into()).into());
    }
    // Another member of an existing cluster: a token for it, no Cluster written.
    let existing = match &args.member {
        None => None,
        Some(_) => match api.get(&cluster_path(Some(&name)), &[]).await {
            Ok(cluster) => Some(cluster),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        },
    };
    if existing.is_none() && (args.region.is_none() || args.location.is_none()) {
        return Err(UsageError(format!(
            "cluster {name:?} does not exist: give --region and --location to create it"
        ))
        .into());
    }
    let reused = existing.is_some();
    let created = match existing {
        Some(cluster) => cluster,
        None => api
            .post(&cluster_path(None), &body)
            .await
            .map_err(|e| {
                if e.is_already_exists() {
                    anyhow::anyhow!(
                        "cluster {name:?} already exists: `fedctl token create {name}` issues another token, `fedctl join {name} --member NAME` adds an agent, `fedctl unjoin {name}` removes it"
                    )
                } else {
                    e.into()
                }
            })?,
    };
    let what = match (&args.member, reused) {
        (Some(member), true) => format!("member {member} of cluster/{name}"),
        (Some(member), false) => format!("cluster/{name} created, for member {member}"),
        (None, _) => format!("cluster/{name} created"),
    };
    let token_request = match (join_flow, args.join_token_ttl) {
        (false, _) => token_path(&name, None),
        (true, None) => format!("{}?type=join", token_path(&name, None)),
        (true, Some(ttl)) => format!("{}?type=join&ttlSeconds={ttl}", token_path(&name, None)),
    };
    let retry = if join_flow {
        format!("fedctl token create {name} --join")
    } else {
        format!("fedctl token create {name}")
    };
    let token = api.post_empty(&token_request).await.with_context(|| {
        format!("cluster {name} was created but its token was not issued (retry with `{retry}`)")
    })?;
    let kind = if join_flow {
        "join token"
    } else {
        "agent token"
    };
    let secret = token["token"]
        .as_str()
        .context("the server's token answer has no token")?
        .to_string();
    let token_id = token["metadata"]["name"].as_str().unwrap_or("").to_string();
    match &emit_plan {
        Some(Emission::Standalone(plan)) => {
            let config = plan.write(&name, &secret, join_flow)?;
            let mut out = std::io::stdout().lock();
            out.write_all(config.as_bytes())?;
            out.flush()?;
            eprintln!(
                "{what}; {kind} {token_id} written to {}",
                plan.token_file(join_flow).display()
            );
            if join_flow {
                eprintln!(
                    "the agent uses it once for a client certificate (expires {}); from then on it authenticates with mTLS and renews the certificate itself",
                    token["expirationTimestamp"].as_str().unwrap_or("?")
                );
            }
        }
        Some(Emission::Kubernetes(plan)) => {
            let manifests = plan.manifests(&name, &secret)?;
            let mut out = std::io::stdout().lock();
            out.write_all(manifests.as_bytes())?;
            out.flush()?;
            eprintln!(
                "{what}; agent token {token_id} is in the Secret {}/fedingress-agent-token above: apply the manifests in the member cluster (kubectl apply -f FILE)",
                plan.namespace
            );
        }
        None => match ctx.global.output {
            Output::Table => {
                println!("{what}");
                if let Some(member) = &args.member {
                    println!("the agent's config needs member: {{name: {member}}}");
                }
                if join_flow {
                    println!(
                        "join token {token_id}, single use, expires {} (shown only now; the agent reads it from its joinTokenFile):",
                        token["expirationTimestamp"].as_str().unwrap_or("?")
                    );
                } else {
                    println!(
                        "agent token {token_id} (shown only now; the agent reads it from its tokenFile):"
                    );
                }
                println!("{secret}");
            }
            output => print_value(output, &json!({"cluster": created, "token": token}))?,
        },
    }
    if args.wait {
        wait_connected(&api, &name, args.timeout).await?;
    }
    Ok(())
}

/// Waits until the cluster's agent is connected, with a spinner on stderr.
async fn wait_connected(api: &Api, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let step = Step::start(
        Stream::Stderr,
        format!("waiting for the agent of {name} to connect"),
        true,
    );
    loop {
        let value = api.get(&cluster_path(Some(name)), &[]).await?;
        let cluster: Cluster = decode(&value, "cluster")?;
        if let Some(status) = cluster.status.as_ref().filter(|s| s.connected) {
            let addresses = address_texts(&status.addresses);
            step.done(&format!(
                "connected: agent {} ({}), serving on {}",
                status.agent_version.as_deref().unwrap_or("?"),
                status.driver.map(|d| d.as_str()).unwrap_or("?"),
                if addresses.is_empty() {
                    "no address yet".to_string()
                } else {
                    addresses.join(", ")
                }
            ));
            return Ok(());
        }
        if step.elapsed() >= timeout {
            step.fail("timed out");
            bail!(
                "timed out after {}s waiting for the agent of {name} to connect (the Cluster and its token exist; check the agent's log)",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What `--emit` prints, checked before anything is written at the hub.
enum Emission {
    Standalone(EmitPlan),
    Kubernetes(KubernetesPlan),
}

impl Emission {
    fn new(
        emit: Emit,
        args: &JoinArgs,
        connection: &crate::kubeconfig::Connection,
    ) -> anyhow::Result<Self> {
        // Flags of the other kind of emission are usage errors, not silently ignored.
        let (this, that, foreign) = match emit {
            Emit::Standalone => (
                "standalone",
                "kubernetes",
                vec![
                    ("--image", args.image.is_some()),
                    ("--agent-namespace", args.agent_namespace.is_some()),
                    ("--profile", args.profile.is_some()),
                ],
            ),
            Emit::Kubernetes => (
                "kubernetes",
                "standalone",
                vec![
                    ("--token-file", args.token_file.is_some()),
                    ("--listen", !args.listens.is_empty()),
                    ("--service", !args.services.is_empty()),
                    ("--admin-address", args.admin_address.is_some()),
                ],
            ),
        };
        if let Some((flag, _)) = foreign.iter().find(|(_, given)| *given) {
            return Err(
                UsageError(format!("{flag} is for --emit {that}, not --emit {this}")).into(),
            );
        }
        Ok(match emit {
            Emit::Standalone => Emission::Standalone(EmitPlan::new(args, connection)?),
            Emit::Kubernetes => Emission::Kubernetes(KubernetesPlan::new(args, connection)?),
        })
    }
}

/// The hub's agent gateway as agents reach it (one address per replica), and a note
/// when it is a guess.
fn hub_addresses(
    args: &JoinArgs,
    connection: &crate::kubeconfig::Connection,
) -> anyhow::Result<(Vec<String>, Option<&'static str>)> {
    if !args.hub_addresses.is_empty() {
        check_hub_addresses(&args.hub_addresses)?;
        return Ok((args.hub_addresses.clone(), None));
    }
    if !connection.agent_gateways.is_empty() {
        check_hub_addresses(&connection.agent_gateways)?;
        return Ok((connection.agent_gateways.clone(), None));
    }
    let assumed = vec![default_gateway(&connection.server).ok_or_else(|| {
        UsageError(format!(
            "cannot derive the agent gateway from server {:?}: pass --hub-address",
            connection.server
        ))
    })?];
    check_hub_addresses(&assumed)?;
    Ok((
        assumed,
        Some("assumed: the API server's host, port 6444 (set it with --hub-address)"),
    ))
}

/// What the agent would refuse in a list of hub addresses: one given twice, or
/// schemes mixed (one caFile serves them all). The agent checks the rest.
fn check_hub_addresses(addresses: &[String]) -> Result<(), UsageError> {
    let https = |a: &str| a.starts_with("https://");
    for (i, address) in addresses.iter().enumerate() {
        let key = address.trim_end_matches('/').to_ascii_lowercase();
        if addresses[..i]
            .iter()
            .any(|a| a.trim_end_matches('/').to_ascii_lowercase() == key)
        {
            return Err(UsageError(format!(
                "--hub-address {address:?} is given twice"
            )));
        }
        if https(address) != https(&addresses[0]) {
            return Err(UsageError(format!(
                "--hub-address {address:?}: every hub address must use the scheme of the first ({:?})",
                addresses[0]
            )));
        }
        if !crate::client::keeps_token_private(address) {
            return Err(UsageError(format!(
                "hub address {address:?} is plain http:// off loopback, which the agent refuses \
                 (its credentials would cross the network in the clear): use the gateway's https:// address"
            )));
        }
    }
    Ok(())
}

/// Whether the agent needs the hub's CA: an https hub (the addresses share a scheme).
fn is_https(addresses: &[String]) -> bool {
    addresses.iter().any(|a| a.starts_with("https://"))
}

/// What `--emit kubernetes` prints: `deploy/kubernetes/` filled in for the cluster.
struct KubernetesPlan {
    hub_addresses: Vec<String>,
    hub_address_note: Option<&'static str>,
    /// The hub's CA (PEM) for an https hub: --hub-ca, else the kubeconfig's.
    hub_ca_pem: Option<String>,
    image: String,
    namespace: String,
    profile: String,
}

impl KubernetesPlan {
    fn new(args: &JoinArgs, connection: &crate::kubeconfig::Connection) -> anyhow::Result<Self> {
        let (hub_addresses, hub_address_note) = hub_addresses(args, connection)?;
        let namespace = args
            .agent_namespace
            .clone()
            .unwrap_or_else(|| "fedingress-system".to_owned());
        if let Some(message) = fedingress_api::names::dns1123_label(&namespace).first() {
            return Err(UsageError(format!("--agent-namespace {namespace:?}: {message}")).into());
        }
        let pem = if !is_https(&hub_addresses) {
            None
        } else if let Some(path) = &args.hub_ca {
            Some(
                std::fs::read(path)
                    .with_context(|| format!("reading the hub CA {}", path.display()))?,
            )
        } else {
            connection.ca_pem.clone()
        };
        let hub_ca_pem = pem
            .map(|pem| {
                String::from_utf8(pem).map_err(|_| anyhow::anyhow!("the hub CA is not PEM text"))
            })
            .transpose()?;
        Ok(Self {
            hub_addresses,
            hub_address_note,
            hub_ca_pem,
            image: args
                .image
                .clone()
                .unwrap_or_else(|| super::agent_manifests::DEFAULT_IMAGE.to_owned()),
            namespace,
            profile: args.profile.clone().unwrap_or_else(|| "auto".to_owned()),
        })
    }

    fn manifests(&self, cluster: &str, token: &str) -> anyhow::Result<String> {
        super::agent_manifests::AgentManifests {
            cluster,
            hub_addresses: &self.hub_addresses,
            hub_address_note: self.hub_address_note,
            hub_ca_pem: self.hub_ca_pem.as_deref(),
            token,
            image: &self.image,
            namespace: &self.namespace,
            profile: &self.profile,
        }
        .render()
    }
}

/// What `--emit standalone` writes: the token file, maybe the hub CA, and the config.
struct EmitPlan {
    token_file: PathBuf,
    /// `--token-file` given, or `NAME.join-token`, for a join token.
    join_token_file: PathBuf,
    hub_addresses: Vec<String>,
    hub_address_note: Option<&'static str>,
    /// The CA file the config names, and PEM to write there first (when the
    /// kubeconfig had the CA inline).
    ca: Option<(PathBuf, Option<Vec<u8>>)>,
    serving: Serving,
}

/// The file and directory names of an emitted agent: `CLUSTER`, or `CLUSTER-MEMBER` for
/// `--member` (each member of a cluster keeps its own token and state).
fn agent_stem(args: &JoinArgs) -> String {
    match &args.member {
        Some(member) => format!("{}-{member}", args.name),
        None => args.name.clone(),
    }
}

impl EmitPlan {
    fn new(args: &JoinArgs, connection: &crate::kubeconfig::Connection) -> anyhow::Result<Self> {
        let token_file = absolute(
            &args
                .token_file
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}.token", agent_stem(args)))),
        )?;
        let (hub_addresses, hub_address_note) = hub_addresses(args, connection)?;
        let ca = if !is_https(&hub_addresses) {
            None
        } else if let Some(path) = &args.hub_ca {
            Some((absolute(path)?, None))
        } else if let Some(path) = &connection.ca_file {
            Some((absolute(path)?, None))
        } else {
            connection.ca_pem.as_ref().map(|pem| {
                let dir = token_file
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                (
                    dir.join(format!("{}-hub-ca.pem", args.name)),
                    Some(pem.clone()),
                )
            })
        };
        let join_token_file = match &args.token_file {
            Some(_) => token_file.clone(),
            None => absolute(&PathBuf::from(format!("{}.join-token", agent_stem(args))))?,
        };
        Ok(Self {
            token_file,
            join_token_file,
            hub_addresses,
            hub_address_note,
            ca,
            serving: Serving {
                listens: args.listens.clone(),
                services: args.services.clone(),
                admin: args.admin_address,
                member: args.member.clone(),
            },
        })
    }

    /// Where the token goes: `--token-file`, else `NAME.token` or, for a join token,
    /// `NAME.join-token`.
    fn token_file(&self, join: bool) -> PathBuf {
        if join {
            self.join_token_file.clone()
        } else {
            self.token_file.clone()
        }
    }

    /// Writes the token (mode 0600) and CA files; returns the config's text.
    fn write(&self, cluster: &str, token: &str, join: bool) -> anyhow::Result<String> {
        let token_file = self.token_file(join);
        write_private(&token_file, format!("{token}\n").as_bytes())
            .with_context(|| format!("writing the token to {}", token_file.display()))?;
        if let Some((path, Some(pem))) = &self.ca {
            std::fs::write(path, pem)
                .with_context(|| format!("writing the hub CA to {}", path.display()))?;
        }
        let text = standalone_config(
            cluster,
            &self.hub_addresses,
            self.hub_address_note,
            self.ca.as_ref().map(|(p, _)| p.as_path()),
            &token_file,
            &self.serving,
        );
        Ok(if join {
            text.replacen(
                &format!(
                    "tokenFile: {}   # the agent token, written by fedctl join (mode 0600)\n",
                    quoted(&token_file.display().to_string())
                ),
                &format!(
                    "joinTokenFile: {}   # single-use join token, written by fedctl join (mode 0600): buys the agent's client certificate (kept in stateDir)\n",
                    quoted(&token_file.display().to_string())
                ),
                1,
            )
        } else {
            text
        })
    }
}

/// `scheme://host:6444` from the API server's URL.
fn default_gateway(server: &str) -> Option<String> {
    let (scheme, rest) = server.split_once("://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    };
    if host.is_empty() {
        return None;
    }
    Some(format!("{scheme}://{host}:6444"))
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .context("reading the current directory")?
            .join(path))
    }
}

/// A YAML string (JSON strings are YAML flow scalars).
fn quoted(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// What an emitted standalone agent serves, as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    /// `--listen`: bind address and what clients reach it as.
    pub listens: Vec<(std::net::IpAddr, Option<String>)>,
    /// `--service`: backend service name and endpoints.
    pub services: Vec<(String, Vec<String>)>,
    /// `--admin-address`: the admin endpoint (`/healthz`, `/readyz`); `None` writes
    /// `127.0.0.1:0` (a port picked at start).
    pub admin: Option<std::net::SocketAddr>,
    /// `--member`: the agent's member name (`member: {name: ...}`; its state dir is
    /// `CLUSTER-MEMBER-state`); `None` leaves the host name as the member name.
    pub member: Option<String>,
}

/// A `cluster-agent` config for the standalone driver. Listen addresses and services
/// not given on the command line are placeholders that the agent rejects until they are
/// filled in.
pub fn standalone_config(
    cluster: &str,
    hub_addresses: &[String],
    hub_address_note: Option<&str>,
    ca_file: Option<&Path>,
    token_file: &Path,
    serving: &Serving,
) -> String {
    let Serving {
        listens,
        services,
        admin,
        member,
    } = serving;
    let mut out = String::new();
    out.push_str(&format!(
        "# cluster-agent config for member cluster {cluster}, written by `fedctl join --emit standalone`.\n# Run it with: cluster-agent --config FILE (relative paths are relative to FILE's directory).\n"
    ));
    if listens.is_empty() || services.is_empty() {
        out.push_str("# Lines marked REPLACE are placeholders: the agent refuses to start until they are filled in.\n");
    }
    out.push_str("hub:\n");
    let note = hub_address_note
        .map(|note| format!("   # {note}"))
        .unwrap_or_default();
    match hub_addresses {
        [one] => out.push_str(&format!("  address: {}{note}\n", quoted(one))),
        several => {
            // Guesses are single addresses: a list has no note.
            out.push_str(
                "  addresses:                         # one per replica: the agent moves to the next when its replica goes away\n",
            );
            for address in several {
                out.push_str(&format!("  - {}\n", quoted(address)));
            }
        }
    }
    if let Some(ca) = ca_file {
        out.push_str(&format!(
            "  caFile: {}\n",
            quoted(&ca.display().to_string())
        ));
    }
    out.push_str(&format!("cluster: {cluster}\n"));
    if let Some(member) = member {
        out.push_str(&format!(
            "member: {{name: {member}}}           # this agent among the cluster's members (labels: and address: for pools)\n"
        ));
    }
    out.push_str(&format!(
        "tokenFile: {}   # the agent token, written by fedctl join (mode 0600)\n",
        quoted(&token_file.display().to_string())
    ));
    out.push_str("driver: standalone\n");
    out.push_str(
        "listen:                              # every rule's port is bound on each address\n",
    );
    if listens.is_empty() {
        out.push_str("- bind: \"REPLACE with a local IP address to serve on, e.g. 0.0.0.0\"\n  advertise: \"REPLACE with the address clients reach (IP or DNS name), or delete this line\"\n");
    }
    for (bind, advertise) in listens {
        out.push_str(&format!("- bind: {}\n", quoted(&bind.to_string())));
        if let Some(advertise) = advertise {
            out.push_str(&format!("  advertise: {}\n", quoted(advertise)));
        }
    }
    out.push_str(
        "services:                            # backend service name -> endpoints (IP:port)\n",
    );
    if services.is_empty() {
        out.push_str(
            "  REPLACE-with-a-service-name: [\"REPLACE with endpoints such as 10.0.0.5:8080\"]\n",
        );
    }
    for (name, endpoints) in services {
        out.push_str(&format!(
            "  {}: [{}]\n",
            quoted(name),
            endpoints
                .iter()
                .map(|e| quoted(e))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let admin = match admin {
        Some(admin) => quoted(&admin.to_string()),
        None => "127.0.0.1:0                     # a port picked at start; a fixed one (--admin-address) for `cluster-agent ready` and keepalived's track script".to_string(),
    };
    out.push_str(&format!(
        "healthCheck:\n  intervalMs: 1000\n  timeoutMs: 500\n  healthyThreshold: 2\n  unhealthyThreshold: 2\nstateDir: {}\nadmin: {admin}\nreportIntervalMs: 5000\n",
        quoted(&match member {
            Some(member) => format!("{cluster}-{member}-state"),
            None => format!("{cluster}-state"),
        })
    ));
    out
}

pub async fn cordon(ctx: &Ctx, name: &str, cordon: bool) -> anyhow::Result<()> {
    let api = ctx.api()?;
    let updated = set_unschedulable(&api, name, cordon).await?;
    match ctx.global.output {
        Output::Table => {
            if cordon {
                println!(
                    "cluster/{name} cordoned: out of every DNS answer and no new placement; its listeners keep serving"
                );
            } else {
                println!("cluster/{name} uncordoned: back in routing and placement");
            }
        }
        output => print_value(output, &updated)?,
    }
    Ok(())
}

async fn set_unschedulable(api: &Api, name: &str, value: bool) -> anyhow::Result<Value> {
    Ok(api
        .merge_patch(
            &cluster_path(Some(name)),
            &json!({"spec": {"unschedulable": value}}),
        )
        .await?)
}

pub async fn unjoin(ctx: &Ctx, args: UnjoinArgs) -> anyhow::Result<()> {
    let api = ctx.api()?;
    let name = args.name.as_str();
    let table = ctx.global.output == Output::Table;
    let say = |text: String| {
        if table {
            println!("{text}");
        } else {
            eprintln!("{text}");
        }
    };
    let value = api.get(&cluster_path(Some(name)), &[]).await?;
    let cluster: Cluster = decode(&value, "cluster")?;
    let started = Instant::now();

    // Which ingresses the cluster serves, and their longest TTL: how long resolvers
    // may still hand out its addresses after it leaves the answers.
    let ingresses = api.get(&ingress_path(None, None), &[]).await?;
    let mut placed: Vec<(String, i32)> = Vec::new();
    for item in ingresses["items"].as_array().into_iter().flatten() {
        let ingress: FederatedIngress = decode(item, "ingress")?;
        let on_cluster = ingress
            .status
            .as_ref()
            .is_some_and(|s| s.clusters.iter().any(|c| c.name == name));
        if on_cluster {
            placed.push((
                format!(
                    "{}/{}",
                    ingress.metadata.namespace.as_deref().unwrap_or("default"),
                    ingress.metadata.name_str()
                ),
                ingress.spec.traffic.ttl,
            ));
        }
    }
    let ttl = placed.iter().map(|(_, ttl)| *ttl).max().unwrap_or(0).max(0) as u64;
    let drain = args.drain.unwrap_or(Duration::from_secs(ttl));

    // 1. Cordon, and wait until the hub has taken the cluster out of routing.
    if !cluster.spec.unschedulable {
        set_unschedulable(&api, name, true).await?;
    }
    say(format!(
        "cluster/{name} cordoned: out of every DNS answer, no new placement"
    ));
    let step = Step::start(
        Stream::Stderr,
        format!("waiting for the hub to take {name} out of routing"),
        false,
    );
    loop {
        let value = api.get(&cluster_path(Some(name)), &[]).await?;
        let cluster: Cluster = decode(&value, "cluster")?;
        let cordoned = cluster.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == "Cordoned")
        });
        if cordoned {
            step.done("");
            break;
        }
        if started.elapsed() >= args.timeout {
            step.fail("timed out");
            bail!(
                "timed out waiting for the hub to report {name} cordoned; it stays cordoned and joined"
            );
        }
        tokio::time::sleep(POLL).await;
    }

    // 2. Drain: resolvers may cache the old answers for one TTL.
    if drain > Duration::ZERO {
        let why = if args.drain.is_some() {
            "--drain".to_string()
        } else {
            format!(
                "one DNS TTL of {}",
                placed
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let step = Step::start(
            Stream::Stderr,
            format!("draining {name}: waiting {}s ({why})", drain.as_secs()),
            true,
        );
        tokio::time::sleep(drain).await;
        step.done("");
        say(format!("cluster/{name} drained ({}s)", drain.as_secs()));
    } else if placed.is_empty() {
        say(format!(
            "cluster/{name} carries no ingress: nothing to drain"
        ));
    }

    // 3. Revoke its tokens, then delete it (which revokes any left, too).
    let tokens = api.get(&token_path(name, None), &[]).await?;
    let mut revoked = Vec::new();
    for item in tokens["items"].as_array().into_iter().flatten() {
        if let Some(id) = item["metadata"]["name"].as_str() {
            match api.delete(&token_path(name, Some(id))).await {
                Ok(_) => revoked.push(id.to_string()),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    match api.delete(&cluster_path(Some(name))).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    loop {
        match api.get(&cluster_path(Some(name)), &[]).await {
            Err(e) if e.is_not_found() => break,
            Err(e) => return Err(e.into()),
            Ok(_) if started.elapsed() >= args.timeout + drain => {
                bail!("cluster {name} is being deleted but is still there (finalizers?)")
            }
            Ok(_) => tokio::time::sleep(POLL).await,
        }
    }
    match ctx.global.output {
        Output::Table => println!(
            "cluster/{name} deleted ({} agent token{} revoked)",
            revoked.len(),
            if revoked.len() == 1 { "" } else { "s" }
        ),
        output => print_value(
            output,
            &json!({
                "cluster": name,
                "deleted": true,
                "drainedSeconds": drain.as_secs(),
                "ingresses": placed.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "revokedTokens": revoked,
            }),
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_defaults_to_port_6444_of_the_api_host() {
        assert_eq!(
            default_gateway("https://hub.example.com:6443").as_deref(),
            Some("https://hub.example.com:6444")
        );
        assert_eq!(
            default_gateway("http://127.0.0.1").as_deref(),
            Some("http://127.0.0.1:6444")
        );
        assert_eq!(
            default_gateway("https://[::1]:6443/").as_deref(),
            Some("https://[::1]:6444")
        );
        assert_eq!(default_gateway("nonsense"), None);
    }

    #[test]
    fn emitted_config_marks_placeholders() {
        let text = standalone_config(
            "eu-west",
            &["https://hub:6444".to_owned()],
            None,
            Some(Path::new("/etc/fed/ca.pem")),
            Path::new("/etc/fed/eu-west.token"),
            &Serving::default(),
        );
        assert!(text.contains("caFile: \"/etc/fed/ca.pem\""), "{text}");
        assert!(
            text.contains("tokenFile: \"/etc/fed/eu-west.token\""),
            "{text}"
        );
        assert!(text.contains("- bind: \"REPLACE"), "{text}");
        assert!(text.contains("REPLACE-with-a-service-name"), "{text}");
        let filled = standalone_config(
            "eu-west",
            &["http://hub:6444".to_owned()],
            None,
            None,
            Path::new("/t"),
            &Serving {
                listens: vec![(
                    "127.0.0.11"
                        .parse()
                        .unwrap_or(std::net::IpAddr::from([0, 0, 0, 0])),
                    Some("lb.example.com".into()),
                )],
                services: vec![("echo".into(), vec!["127.0.0.1:9000".into()])],
                admin: None,
                member: None,
            },
        );
        assert!(!filled.contains("REPLACE"), "{filled}");
        assert!(filled.contains("- bind: \"127.0.0.11\"\n  advertise: \"lb.example.com\"\n"));
        assert!(filled.contains("  \"echo\": [\"127.0.0.1:9000\"]\n"));
        let parsed: yaml_serde::Value = yaml_serde::from_str(&filled).unwrap_or_default();
        assert_eq!(parsed["cluster"].as_str(), Some("eu-west"));
        assert_eq!(parsed["stateDir"].as_str(), Some("eu-west-state"));
        assert_eq!(parsed["hub"]["address"].as_str(), Some("http://hub:6444"));
        assert!(parsed["hub"].get("addresses").is_none(), "{filled}");
        assert_eq!(parsed["admin"].as_str(), Some("127.0.0.1:0"), "{filled}");
    }

    /// Issue 24: `--member` names the agent's member; its state dir is its own.
    #[test]
    fn a_member_is_emitted_with_its_own_state_dir() {
        let text = standalone_config(
            "eu-west",
            &["https://hub:6444".to_owned()],
            None,
            None,
            Path::new("/t"),
            &Serving {
                member: Some("web-2".into()),
                ..Serving::default()
            },
        );
        let parsed: yaml_serde::Value = yaml_serde::from_str(&text).unwrap_or_default();
        assert_eq!(parsed["member"]["name"].as_str(), Some("web-2"), "{text}");
        assert_eq!(parsed["stateDir"].as_str(), Some("eu-west-web-2-state"));
        let plain = standalone_config(
            "eu-west",
            &["https://hub:6444".to_owned()],
            None,
            None,
            Path::new("/t"),
            &Serving::default(),
        );
        assert!(!plain.contains("member:"), "{plain}");
    }

    /// `--emit standalone` always wrote `admin: 127.0.0.1:0`, and no flag could fix the
    /// port that `cluster-agent ready` and keepalived's track script ask (issue 23).
    #[test]
    fn the_admin_address_is_emitted_as_given() {
        for (given, written) in [
            ("127.0.0.1:9901", "127.0.0.1:9901"),
            ("[::1]:9901", "[::1]:9901"),
        ] {
            let text = standalone_config(
                "eu-west",
                &["http://hub:6444".to_owned()],
                None,
                None,
                Path::new("/t"),
                &Serving {
                    admin: given.parse().ok(),
                    ..Serving::default()
                },
            );
            let parsed: yaml_serde::Value = yaml_serde::from_str(&text).unwrap_or_default();
            assert_eq!(parsed["admin"].as_str(), Some(written), "{text}");
        }
    }

    #[test]
    fn several_hub_addresses_are_emitted_as_a_list() {
        let addresses = ["https://hub-a:6444", "https://hub-b:6444"].map(str::to_owned);
        let text = standalone_config(
            "eu-west",
            &addresses,
            None,
            Some(Path::new("/etc/fed/ca.pem")),
            Path::new("/t"),
            &Serving::default(),
        );
        let parsed: yaml_serde::Value = yaml_serde::from_str(&text).unwrap_or_default();
        let hub = &parsed["hub"];
        assert!(hub.get("address").is_none(), "{text}");
        let listed: Vec<&str> = hub["addresses"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(listed, addresses, "{text}");
        assert_eq!(hub["caFile"].as_str(), Some("/etc/fed/ca.pem"));
    }

    #[test]
    fn hub_address_lists_are_checked_before_anything_is_written() {
        let list = |a: &[&str]| a.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert!(check_hub_addresses(&list(&["https://a:6444", "https://b:6444"])).is_ok());
        let twice = check_hub_addresses(&list(&["https://a:6444", "https://A:6444/"]));
        assert!(
            twice.is_err_and(|e| e.0.contains("\"https://A:6444/\" is given twice")),
            "a duplicate"
        );
        let mixed = check_hub_addresses(&list(&["https://a:6444", "http://b:6444"]));
        assert!(
            mixed.is_err_and(|e| e.0.contains("scheme of the first")),
            "mixed schemes"
        );
        assert!(is_https(&list(&["https://a:6444"])));
        assert!(!is_https(&list(&["http://a:6444"])));
        let plaintext = check_hub_addresses(&list(&["http://hub.example:6444"]));
        assert!(
            plaintext.is_err_and(|e| e.0.contains("plain http:// off loopback")),
            "plain http to a remote hub"
        );
        assert!(
            check_hub_addresses(&list(&["http://127.0.0.1:6444", "http://[::1]:6444"])).is_ok()
        );
    }
}
