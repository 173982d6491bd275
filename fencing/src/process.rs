//! Placeholder so the workspace compiles; being written.
