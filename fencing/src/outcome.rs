//! What fencing answers: one method's outcome, one attempt, one run of the chain. Below
//! the chain and its methods, which both speak it.

use std::fmt;
use std::time::Duration;

/// What one fence method answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Verified: nothing of the old incarnation remains (or its host is off or rebooted).
    Fenced,
    /// The method cannot act on this target (another host, outside its `nodes`), and why.
    NotApplicable(String),
    /// The method tried and could not verify the target fenced, and why.
    Failed(String),
}

impl Outcome {
    /// `fenced`, `not_applicable` or `failed`: the `outcome` label of logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Fenced => "fenced",
            Outcome::NotApplicable(_) => "not_applicable",
            Outcome::Failed(_) => "failed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fenced => f.write_str("fenced"),
            Outcome::NotApplicable(why) => write!(f, "not applicable ({why})"),
            Outcome::Failed(why) => write!(f, "failed ({why})"),
        }
    }
}

/// One method's attempt on one target.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// [`FenceMethod::label`]: `ssh`, `signal`, `script:fence-by-port`.
    pub method: String,
    /// What the method answered.
    pub outcome: Outcome,
    /// From the start of the attempt to its answer, cleanup included.
    pub elapsed: Duration,
}

/// Every attempt of one run of the chain, in order.
#[derive(Clone, Debug, Default)]
pub struct FenceReport {
    /// Up to and including the first that fenced.
    pub attempts: Vec<Attempt>,
}

impl FenceReport {
    /// The method that fenced the target, if one did.
    pub fn fenced_by(&self) -> Option<&str> {
        self.attempts
            .iter()
            .find(|a| a.outcome == Outcome::Fenced)
            .map(|a| a.method.as_str())
    }

    /// Whether some method fenced the target.
    pub fn is_fenced(&self) -> bool {
        self.fenced_by().is_some()
    }

    /// One line for an operator: the verdict, then every method with its outcome, reason
    /// and duration.
    pub fn summary(&self) -> String {
        let verdict = match self.fenced_by() {
            Some(m) => format!("fenced by {m}"),
            None => "NOT fenced".to_string(),
        };
        if self.attempts.is_empty() {
            return format!("{verdict}: no fence method is configured");
        }
        let attempts: Vec<String> = self
            .attempts
            .iter()
            .map(|a| {
                format!(
                    "{}: {} after {}ms",
                    a.method,
                    a.outcome,
                    a.elapsed.as_millis()
                )
            })
            .collect();
        format!("{verdict}: {}", attempts.join("; "))
    }
}

/// What a method's own code reports: the outcome and, when it fenced, how (for the log).
#[derive(Debug)]
pub struct MethodResult {
    pub outcome: Outcome,
    pub how: Option<String>,
}

impl MethodResult {
    pub fn fenced(how: impl Into<String>) -> Self {
        MethodResult {
            outcome: Outcome::Fenced,
            how: Some(how.into()),
        }
    }
    pub fn not_applicable(why: impl Into<String>) -> Self {
        MethodResult {
            outcome: Outcome::NotApplicable(why.into()),
            how: None,
        }
    }
    pub fn failed(why: impl Into<String>) -> Self {
        MethodResult {
            outcome: Outcome::Failed(why.into()),
            how: None,
        }
    }
}
