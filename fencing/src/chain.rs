//! Placeholder so the workspace compiles; being written.
use crate::{FenceContext, FenceMethod, Target};
use std::time::Duration;

/// Placeholder.
pub struct FenceChain;
/// Placeholder.
#[derive(Debug, Clone)]
pub enum Outcome {
    Fenced,
    NotApplicable(String),
    Failed(String),
}
/// Placeholder.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub method: String,
    pub outcome: Outcome,
    pub elapsed: Duration,
}
/// Placeholder.
#[derive(Debug, Clone, Default)]
pub struct FenceReport {
    pub attempts: Vec<Attempt>,
}
impl FenceChain {
    pub fn new(_m: Vec<FenceMethod>, _c: FenceContext) -> Self {
        FenceChain
    }
    pub async fn fence(&self, _t: &Target) -> FenceReport {
        FenceReport::default()
    }
}
