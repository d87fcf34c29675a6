//! hetch's benchmark harness (`hetch-lab bench`): it makes datasets, starts the peers'
//! servers, runs each tool over loopback or the `hetch-lab wan` testbed, appends every run
//! to a resumable results file, and turns the results into statistics, a Markdown
//! report and SVG plots, normalised to the best tool as paper 003 does. [`s3`] does the
//! same for moving files to and from an S3 store.

#![deny(missing_docs)]

pub mod dataset;
pub mod minio;
mod net;
pub mod peers;
pub mod place;
pub mod plot;
pub mod record;
pub mod report;
pub mod results;
pub mod run;
pub mod s3;
mod server;
pub mod stats;
pub mod streaming;
pub mod tool;
pub mod tools;
pub mod writer;

pub use place::Place;
pub use record::{Lag, Meta, Mode, Point, Record, ToolInfo};
pub use tool::{Tool, ToolContext};
