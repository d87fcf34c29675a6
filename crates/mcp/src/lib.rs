//! `hetch mcp`: hetch as Model Context Protocol tools, so an assistant can look at
//! data, plan transfers, start them once the user agrees, and watch them, inside
//! limits the operator sets.
//!
//! - [`policy`]: the operator's guardrails (a TOML file): where the assistant may read
//!   and write, bytes and files per action, a rate ceiling, whether it may delete.
//!   Every location is checked as strictly as a network peer's input.
//! - [`tools`]: the tools and their arguments (unknown arguments are refused).
//! - [`actions`]: a copy or sync checked against the policy, and its `hetch` command.
//! - [`plans`]: acting tools answer with a plan and a single-use confirmation token;
//!   only that token carries the plan out.
//! - [`runner`] and [`transfers`]: every tool runs the `hetch` binary itself
//!   (`--json`, `--progress-json`), so results have the command line's fields.
//! - [`audit`]: one JSON line per call, allowed or refused; the log fails closed.
//! - [`server`]: the MCP server (the official Rust SDK, `rmcp`), over stdio.

#![deny(missing_docs)]

pub mod actions;
pub mod audit;
mod manifest;
pub mod plans;
pub mod policy;
pub mod runner;
pub mod server;
pub mod tools;
pub mod transfers;

pub use policy::Policy;
pub use server::McpServer;

/// Serves MCP on stdin and stdout until the client goes away, running `hetch` (the
/// binary at `hetch`) under `policy`. Transfers still running then are stopped (a
/// retry resumes them).
pub async fn serve_stdio(policy: Policy, hetch: std::path::PathBuf) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let server = McpServer::new(policy, hetch)?;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake: {e}"))?;
    running.waiting().await?;
    Ok(())
}
