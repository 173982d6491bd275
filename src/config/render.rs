//! Rendering the resolved config, secrets masked (`check-config`).

use super::*;

/// What a masked secret is shown as.
pub(super) const MASK: &str = "****";

/// `digest:warden:secret` -> `digest:warden:****`; any other scheme's credentials are
/// masked whole, since their user part cannot be told from the secret.
pub(super) fn mask_auth(auth: &str) -> String {
    match auth.split_once(':') {
        Some(("digest", credentials)) => match credentials.split_once(':') {
            Some((user, _)) => format!("digest:{user}:{MASK}"),
            None => format!("digest:{MASK}"),
        },
        Some((scheme, _)) => format!("{scheme}:{MASK}"),
        None => MASK.to_string(),
    }
}

/// Whether a fence agent option holds a secret. `*_script` options name a program that
/// prints the secret (`password_script`), which is safe and useful to show.
pub(super) fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !k.ends_with("_script")
        && ["password", "passwd", "secret", "token", "key"]
            .iter()
            .any(|word| k.contains(word))
}

/// Removes `[fence.options]` headers with nothing under them: an env-protocol script has
/// empty options, which the serializer still writes as a table of its own.
pub(super) fn drop_empty_options(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map(|l| l.trim());
        if lines[i] == "[fence.options]" && next.is_none_or(|n| n.is_empty() || n.starts_with('['))
        {
            i += if next == Some("") { 2 } else { 1 };
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

impl Config {
    /// The resolved config as TOML, every default filled in and secrets masked, for
    /// `warden check-config`. Without secrets it parses back to an equal config.
    pub fn render_masked(&self) -> String {
        let mut shown = self.clone();
        if let Some(auth) = &mut shown.coordination.zookeeper.auth {
            *auth = mask_auth(auth);
        }
        for method in &mut shown.fence {
            if let FenceMethod::Script(m) = method {
                for (key, value) in m.options.iter_mut() {
                    if is_secret_option(key) {
                        *value = MASK.to_string();
                    }
                }
            }
        }
        let mut out = String::from(
            "# warden configuration as resolved: every default filled in, secrets shown as ****.\n",
        );
        if self.cluster.host.is_none() {
            out.push_str(&format!(
                "# cluster.host is not set: peers reach this node at its hostname, {:?}.\n",
                self.host()
            ));
        }
        if self.api.is_none() {
            out.push_str("# [api] is not set: no HTTP listener.\n");
        }
        out.push('\n');
        match toml::to_string_pretty(&shown) {
            Ok(body) => out.push_str(&drop_empty_options(&body)),
            // Every field is a string, number, list or table, so this cannot happen; if it
            // does, the operator still learns why nothing was printed.
            Err(e) => out.push_str(&format!("# cannot render the configuration: {e}\n")),
        }
        out
    }
}
