//! Authentication (bearer tokens from a token file, anonymous admin in dev mode on
//! loopback) and authorization (two groups: admins do everything, viewers read).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

/// Group whose members may do everything.
pub const ADMINS: &str = "fedingress:admins";
/// Group whose members may get, list and watch.
pub const VIEWERS: &str = "fedingress:viewers";

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl User {
    fn dev_admin() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec![ADMINS.into()],
        }
    }

    /// Whether this user may perform `verb` (Kubernetes verbs: get, list, watch, create, ...).
    pub fn may(&self, verb: &str) -> bool {
        if self.groups.iter().any(|g| g == ADMINS) {
            return true;
        }
        let read = matches!(verb, "get" | "list" | "watch");
        read && self.groups.iter().any(|g| g == VIEWERS)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("reading token file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("token file {path} line {line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
}

/// How requests are authenticated.
#[derive(Clone, Debug, Default)]
pub struct Authenticator {
    tokens: HashMap<String, User>,
    /// Dev mode: requests without a token from a loopback peer are an admin.
    dev: bool,
}

impl Authenticator {
    pub fn new(dev: bool) -> Self {
        Self {
            tokens: HashMap::new(),
            dev,
        }
    }

    /// Loads a kube-apiserver style static token file: `token,user,uid,"group1,group2"`.
    pub fn load_token_file(&mut self, path: &Path) -> Result<(), TokenFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: shown.clone(),
            source,
        })?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let problem = |problem: &str| TokenFileError::Line {
                path: shown.clone(),
                line: index + 1,
                problem: problem.to_string(),
            };
            let fields = split_csv(line).map_err(&problem)?;
            if fields.len() < 3 {
                return Err(problem("expected token,user,uid[,\"group1,group2\"]"));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(problem("token and user must not be empty"));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let user = User {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
            };
            if self.tokens.insert(fields[0].clone(), user).is_some() {
                return Err(problem("duplicate token"));
            }
        }
        Ok(())
    }

    /// The user behind a request, or `None` (401).
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Option<User> {
        match authorization {
            Some(header) => {
                let token = header.strip_prefix("Bearer ")?.trim();
                self.tokens.get(token).cloned()
            }
            None if self.dev && peer.is_some_and(|p| p.ip().is_loopback()) => {
                Some(User::dev_admin())
            }
            None => None,
        }
    }
}

/// Splits one CSV line, honouring double quotes (`""` inside quotes is a quote).
fn split_csv(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => {
                quoted = false;
                if !matches!(chars.peek(), None | Some(',')) {
                    return Err("unexpected text after a closing quote");
                }
            }
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote");
    }
    fields.push(field);
    Ok(fields.into_iter().map(|f| f.trim().to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_token_file_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(
            &path,
            "# comment\nadmintoken,alice,1,\"fedingress:admins,other\"\nviewtoken,bob,2,fedingress:viewers\nnogroup,carol,3\n",
        )
        .unwrap();
        let mut auth = Authenticator::new(false);
        auth.load_token_file(&path).unwrap();
        let alice = auth.authenticate(Some("Bearer admintoken"), None).unwrap();
        assert_eq!(alice.groups, vec!["fedingress:admins", "other"]);
        assert!(alice.may("delete"));
        let bob = auth.authenticate(Some("Bearer viewtoken"), None).unwrap();
        assert!(bob.may("watch") && !bob.may("create"));
        let carol = auth.authenticate(Some("Bearer nogroup"), None).unwrap();
        assert!(!carol.may("get"));
        assert!(auth.authenticate(Some("Bearer wrong"), None).is_none());
        assert!(auth.authenticate(None, None).is_none());
    }

    #[test]
    fn rejects_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "tok,alice\n").unwrap();
        let err = Authenticator::new(false)
            .load_token_file(&path)
            .unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        std::fs::write(&path, "tok,alice,1,\"unterminated\n").unwrap();
        assert!(Authenticator::new(false).load_token_file(&path).is_err());
    }

    #[test]
    fn dev_mode_is_admin_on_loopback_only() {
        let auth = Authenticator::new(true);
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let remote: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        assert!(auth.authenticate(None, Some(local)).unwrap().may("delete"));
        assert!(auth.authenticate(None, Some(remote)).is_none());
    }
}
