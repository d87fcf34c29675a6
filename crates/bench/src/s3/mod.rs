//! `hetch-lab bench s3`: moving data between files and an S3 store (MinIO), file -> store
//! (up) and store -> file (down), for hetch in front of the store as an agent
//! (`hetch serve --root s3://...` next to MinIO), hetch talking S3 itself, aws-cli,
//! rclone and s5cmd, with iperf3 as the link's limit; over loopback and the
//! `hetch-lab wan` testbed (MinIO and the agent on the server host, every client on the
//! other). Each run is timed around the tool's process and verified by BLAKE3 of every
//! file before it counts.
//!
//! - [`record`]: the results file and its meta file;
//! - [`tools`]: the tools and their commands;
//! - [`run`]: the plan and the runner;
//! - [`report`]: the Markdown report.

pub mod record;
pub mod report;
pub mod run;
pub mod tools;
mod verify;

pub use record::{Direction, S3Meta, S3Record, S3Results, S3ToolInfo};
pub use run::{S3Link, S3Plan, S3Progress};
