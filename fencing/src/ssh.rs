//! `kind = "ssh"`: NOT IMPLEMENTED YET. Every attempt fails (never "fenced", never "not
//! applicable"), so a chain that relies on ssh falls through to its next method and an
//! operator sees why. The real method (SPEC §5: `ssh2`, host key checked against
//! `known_hosts`, `warden fence-local` on the target host) replaces this file.

use crate::chain::MethodResult;
use crate::{FenceContext, SshFence, Target};
use tokio::time::Instant;

const NOT_IMPLEMENTED: &str = "ssh fencing is not implemented in this build";

pub(crate) async fn fence(
    _m: &SshFence,
    _ctx: &FenceContext,
    _target: &Target,
    _deadline: Instant,
) -> MethodResult {
    MethodResult::failed(NOT_IMPLEMENTED)
}

pub(crate) fn plan(m: &SshFence, target: &Target) -> String {
    format!(
        "would fail: {NOT_IMPLEMENTED} (configured for {}@{}:{})",
        m.user,
        target.host.as_deref().unwrap_or("<unknown host>"),
        m.port
    )
}
