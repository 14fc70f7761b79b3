//! What `join --emit kubernetes` prints: the manifests of `deploy/kubernetes/` (compiled
//! in, in the kustomization's order) filled in for one member cluster — the agent's
//! namespace, the cluster name, the hub's addresses (one per replica) and CA, the agent
//! token in the Secret, the image and the rendering profile — as one multi-document YAML.
//!
//! The files are filled in as text, so their comments stay for whoever applies them;
//! every placeholder must be found (a changed base fails the tests, not a user).

use anyhow::bail;

/// The kustomization's resources, in its order (namespace first, Deployment last).
const BASE: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../../deploy/kubernetes/namespace.yaml"),
    ),
    (
        "serviceaccount.yaml",
        include_str!("../../../deploy/kubernetes/serviceaccount.yaml"),
    ),
    (
        "clusterrole.yaml",
        include_str!("../../../deploy/kubernetes/clusterrole.yaml"),
    ),
    (
        "clusterrolebinding.yaml",
        include_str!("../../../deploy/kubernetes/clusterrolebinding.yaml"),
    ),
    (
        "role.yaml",
        include_str!("../../../deploy/kubernetes/role.yaml"),
    ),
    (
        "rolebinding.yaml",
        include_str!("../../../deploy/kubernetes/rolebinding.yaml"),
    ),
    (
        "configmap.yaml",
        include_str!("../../../deploy/kubernetes/configmap.yaml"),
    ),
    (
        "secret.yaml",
        include_str!("../../../deploy/kubernetes/secret.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../deploy/kubernetes/deployment.yaml"),
    ),
];

/// The base's namespace, replaced everywhere.
const BASE_NAMESPACE: &str = "fedingress-system";
/// The base's image reference (the kustomization's `images:` name).
const BASE_IMAGE: &str = "image: fedingress/cluster-agent\n";
/// The default `--image`.
pub const DEFAULT_IMAGE: &str = concat!("fedingress/cluster-agent:", env!("CARGO_PKG_VERSION"));

/// One member cluster's values.
pub struct AgentManifests<'a> {
    pub cluster: &'a str,
    /// The hub's agent gateway, one address per federation-apiserver replica.
    pub hub_addresses: &'a [String],
    /// Said next to the hub address when it was guessed.
    pub hub_address_note: Option<&'a str>,
    /// The hub's CA bundle (PEM), for an https hub that the system roots do not verify.
    pub hub_ca_pem: Option<&'a str>,
    pub token: &'a str,
    pub image: &'a str,
    pub namespace: &'a str,
    /// `kubernetes.profile` (`auto`, `gcp`, ...).
    pub profile: &'a str,
}

/// A YAML string (JSON strings are YAML flow scalars).
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// `text` with `from` replaced by `to`, which must occur in it.
fn replace(text: &str, file: &str, from: &str, to: &str) -> anyhow::Result<String> {
    if !text.contains(from) {
        bail!("deploy/kubernetes/{file} no longer holds {from:?}");
    }
    Ok(text.replace(from, to))
}

/// `text` without the line containing `needle` (which must be there).
fn drop_line(text: &str, file: &str, needle: &str) -> anyhow::Result<String> {
    if !text.contains(needle) {
        bail!("deploy/kubernetes/{file} no longer holds {needle:?}");
    }
    Ok(text
        .split_inclusive('\n')
        .filter(|line| !line.contains(needle))
        .collect())
}

impl AgentManifests<'_> {
    /// The manifests as one multi-document YAML.
    ///
    /// # Errors
    /// Only when `deploy/kubernetes/` lost a placeholder this fills in (a bug).
    pub fn render(&self) -> anyhow::Result<String> {
        let mut out = format!(
            "# The cluster agent of member cluster {cluster}, written by `fedctl join --emit kubernetes`.\n\
             # Apply it in that cluster: kubectl apply -f FILE. The Secret holds the agent token: keep this private.\n",
            cluster = self.cluster
        );
        for (file, text) in BASE {
            let mut text = text.replace(BASE_NAMESPACE, self.namespace);
            match *file {
                "configmap.yaml" => text = self.config_map(&text)?,
                "secret.yaml" => {
                    text = replace(
                        &text,
                        file,
                        "REPLACE-with-the-agent-token",
                        &quoted(self.token),
                    )?;
                }
                "deployment.yaml" => {
                    text = replace(
                        &text,
                        file,
                        BASE_IMAGE,
                        &format!("image: {}\n", quoted(self.image)),
                    )?;
                }
                _ => {}
            }
            out.push_str("---\n");
            out.push_str(&text);
        }
        Ok(out)
    }

    /// The ConfigMap: the agent config and the hub's CA.
    fn config_map(&self, text: &str) -> anyhow::Result<String> {
        let file = "configmap.yaml";
        let hub = match self.hub_addresses {
            [one] => format!("address: {}", quoted(one)),
            several => format!(
                "addresses: [{}]",
                several
                    .iter()
                    .map(|a| quoted(a))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let hub = match self.hub_address_note {
            Some(note) => format!("{hub}   # {note}"),
            None => hub,
        };
        let mut text = replace(
            text,
            file,
            "address: \"https://REPLACE-hub-host:6444\"   # the federation-apiserver's agent gateway",
            &hub,
        )?;
        if self.hub_addresses.len() > 1 {
            // The hint at addresses is taken.
            text = drop_line(&text, file, "# addresses: [")?;
        }
        // Padded to the placeholder's width, so the comments stay aligned.
        const CLUSTER: &str = "REPLACE-cluster-name";
        text = replace(
            &text,
            file,
            CLUSTER,
            &format!("{:<width$}", self.cluster, width = CLUSTER.len()),
        )?;
        text = replace(
            &text,
            file,
            "      profile: auto\n",
            &format!("      profile: {}\n", self.profile),
        )?;
        const CA: &str = "  hub-ca.pem: |\n    REPLACE with the PEM CA bundle that signed the hub's agent gateway certificate\n";
        match self.hub_ca_pem {
            Some(pem) => {
                let mut block = String::from("  hub-ca.pem: |\n");
                for line in pem.lines().filter(|l| !l.trim().is_empty()) {
                    block.push_str("    ");
                    block.push_str(line.trim_end());
                    block.push('\n');
                }
                text = replace(&text, file, CA, &block)?;
            }
            None => {
                text = replace(&text, file, CA, "")?;
                text = drop_line(&text, file, "caFile: hub-ca.pem")?;
            }
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn documents(text: &str) -> Vec<yaml_serde::Value> {
        yaml_serde::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect()
    }

    fn find<'v>(docs: &'v [yaml_serde::Value], kind: &str) -> &'v yaml_serde::Value {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap()
    }

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const HUB: &str = "https://hub.example.com:6444";

    fn manifests<'a>(
        hubs: &'a [String],
        ca: Option<&'a str>,
        note: Option<&'a str>,
    ) -> AgentManifests<'a> {
        AgentManifests {
            cluster: "eu-west",
            hub_addresses: hubs,
            hub_address_note: note,
            hub_ca_pem: ca,
            token: "abc.def",
            image: "registry.example.com/fedingress/cluster-agent:1.2",
            namespace: "fed-agent",
            profile: "gcp",
        }
    }

    #[test]
    fn manifests_are_the_base_filled_in_for_one_cluster() {
        let hubs = [HUB.to_owned()];
        let text = manifests(&hubs, Some(PEM), None).render().unwrap();
        assert!(!text.contains("REPLACE"), "{text}");
        assert!(!text.contains(BASE_NAMESPACE), "{text}");
        let docs = documents(&text);
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Secret",
                "Deployment"
            ]
        );
        assert_eq!(
            find(&docs, "Namespace")["metadata"]["name"].as_str(),
            Some("fed-agent")
        );
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap();
            if !kind.starts_with("Cluster") && kind != "Namespace" {
                assert_eq!(
                    doc["metadata"]["namespace"].as_str(),
                    Some("fed-agent"),
                    "{kind}"
                );
            }
        }
        assert_eq!(
            find(&docs, "ClusterRoleBinding")["subjects"][0]["namespace"].as_str(),
            Some("fed-agent")
        );
        assert_eq!(
            find(&docs, "Secret")["stringData"]["token"].as_str(),
            Some("abc.def")
        );
        let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            container["image"].as_str(),
            Some("registry.example.com/fedingress/cluster-agent:1.2")
        );
        let data = &find(&docs, "ConfigMap")["data"];
        assert_eq!(data["hub-ca.pem"].as_str(), Some(PEM));
        let config: yaml_serde::Value =
            yaml_serde::from_str(data["agent.yaml"].as_str().unwrap()).unwrap();
        assert_eq!(config["cluster"].as_str(), Some("eu-west"));
        assert_eq!(config["driver"].as_str(), Some("kubernetes"));
        assert_eq!(
            config["hub"]["address"].as_str(),
            Some("https://hub.example.com:6444")
        );
        assert_eq!(config["hub"]["caFile"].as_str(), Some("hub-ca.pem"));
        assert_eq!(config["kubernetes"]["profile"].as_str(), Some("gcp"));
        // The token file is where the Deployment mounts the Secret.
        let mounts = container["volumeMounts"].as_sequence().unwrap();
        let token_mount = mounts
            .iter()
            .find(|m| m["name"].as_str() == Some("token"))
            .unwrap();
        assert_eq!(
            config["tokenFile"].as_str().unwrap(),
            format!("{}/token", token_mount["mountPath"].as_str().unwrap())
        );
    }

    /// Apart from the values filled in, the agent config is the base's, key for key: the
    /// base is the one `cluster-agent`'s tests parse as a valid config.
    #[test]
    fn the_agent_config_differs_from_the_base_only_in_the_filled_in_values() {
        let base_docs = documents(BASE[6].1);
        let mut base: yaml_serde::Value =
            yaml_serde::from_str(base_docs[0]["data"]["agent.yaml"].as_str().unwrap()).unwrap();
        let hubs = [HUB.to_owned()];
        let text = manifests(&hubs, None, Some("assumed")).render().unwrap();
        let docs = documents(&text);
        let data = &find(&docs, "ConfigMap")["data"];
        assert!(data.get("hub-ca.pem").is_none(), "{text}");
        assert!(
            text.contains("\"https://hub.example.com:6444\"   # assumed\n"),
            "{text}"
        );
        let emitted: yaml_serde::Value =
            yaml_serde::from_str(data["agent.yaml"].as_str().unwrap()).unwrap();
        base["cluster"] = "eu-west".into();
        base["hub"]["address"] = "https://hub.example.com:6444".into();
        base["kubernetes"]["profile"] = "gcp".into();
        if let Some(hub) = base["hub"].as_mapping_mut() {
            hub.remove("caFile");
        }
        assert_eq!(emitted, base);
    }

    #[test]
    fn several_hub_addresses_become_the_addresses_list() {
        let hubs = ["https://hub-a:6444", "https://hub-b:6444"].map(str::to_owned);
        let text = manifests(&hubs, Some(PEM), None).render().unwrap();
        assert!(!text.contains("REPLACE"), "{text}");
        assert!(!text.contains("# addresses:"), "{text}");
        let docs = documents(&text);
        let data = &find(&docs, "ConfigMap")["data"];
        let config: yaml_serde::Value =
            yaml_serde::from_str(data["agent.yaml"].as_str().unwrap()).unwrap();
        assert!(config["hub"].get("address").is_none(), "{text}");
        let listed: Vec<&str> = config["hub"]["addresses"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(listed, hubs);
        assert_eq!(config["hub"]["caFile"].as_str(), Some("hub-ca.pem"));
    }
}
