//! The transfer service's API as types: every request and reply of its HTTPS routes
//! (see `docs/design/service.md`), with the checks the service runs on what clients
//! send, and their JSON Schemas for its OpenAPI document. The service, `hetch job`,
//! `hetch worker` and the web interface's server side all (de)serialize these, so the
//! wire format is written once.
//!
//! - [`job`]: a job's spec, its view, its listing's rows, the error body.
//! - [`schedule`]: recurring mirrors (a job's spec run at each due time), and
//!   [`cron`], the cron expressions they take.
//! - [`work`]: the worker routes: claims, heartbeats and reports on units.
//! - [`dest`]: where a job's destination below the root is, and whether the job
//!   would copy a source into itself there.
//! - [`stream`]: streaming jobs (`--follow`, `--watch`) and the lag they report.
//! - [`access`]: what a job may touch, recorded with it from its submitter's identity.
//! - [`web`]: what the routes of the web interface answer: who is calling, the live
//!   snapshot, the nodes, a job's activity.
//! - [`webhook`]: a job's webhook, its delivery and the body it is sent.
//! - [`schema`]: the JSON Schemas of all of them.
//! - `client` (feature `client`): the HTTPS client, with the service's key pinned as
//!   for `hetch cp`.
//! - `show` (feature `client`): jobs as a terminal shows them (`hetch job`), and
//!   `show_schedule` schedules (`hetch job schedule`).

#![deny(missing_docs)]

pub mod access;
#[cfg(feature = "client")]
pub mod client;
pub mod cron;
pub mod dest;
pub mod job;
pub mod object_ranges;
pub mod schedule;
pub mod schema;
#[cfg(feature = "client")]
pub mod show;
#[cfg(feature = "client")]
pub mod show_schedule;
pub mod stream;
pub mod web;
pub mod webhook;
pub mod work;

pub use access::Access;

/// The port `hetch service` listens on unless told otherwise (`--listen`), and the
/// one `hetch job` and `hetch worker` reach a `--service` given without a port.
pub const DEFAULT_PORT: u16 = 7879;
pub use job::*;
pub use object_ranges::{
    RangeReport, RangesReply, RangesRequest, ReportedRange, UploadReply, UploadRequest,
};
pub use schedule::{RunView, ScheduleSpec, ScheduleView};
pub use stream::{LagView, StreamSpec};
pub use web::*;
pub use webhook::{DeliveryView, Notice, Webhook, WebhookView};
pub use work::*;
