//! Feeding a script to `nft -f -` (shared by the ensemble's partitions and the recipes'
//! fault campaign, which includes this file by path).

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `cmd` (an `nft -f -`, or a wrapper that ends in one) with `script` on its stdin:
/// all of it or nothing.
pub fn feed_nft(mut cmd: Command, script: &str) -> Result<(), String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e} (apt-get install -y nftables)"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .map_err(|e| format!("cannot write to nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft -f failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
