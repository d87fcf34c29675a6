//! `hetch job schedule ...`: recurring mirrors made by `hetch job submit --every` or
//! `--cron`, listed, shown with their newest runs, paused, resumed and deleted.

use std::process::ExitCode;

use clap::Subcommand;
use hetch_service_api::client::Client;
use hetch_service_api::show_schedule;

/// What to do with schedules.
#[derive(Subcommand)]
pub enum ScheduleCmd {
    /// List schedules, newest first (yours; all of them with the service's token).
    Ls,
    /// Show a schedule: how it recurs, its next run, and its newest runs (job, state,
    /// when it started, bytes; or why a due time was skipped).
    Show {
        /// The schedule's id.
        id: String,
    },
    /// Pause a schedule: no runs until it is resumed (a run going on goes on).
    Pause {
        /// The schedule's id.
        id: String,
    },
    /// Resume a paused schedule; due times missed meanwhile are not run, an interval
    /// runs at once.
    Resume {
        /// The schedule's id.
        id: String,
    },
    /// Delete a schedule and its history (its jobs stay).
    Rm {
        /// The schedule's id.
        id: String,
    },
}

/// Runs `cmd` on the service `c` reaches.
pub async fn run(c: &Client, cmd: &ScheduleCmd, json: bool) -> anyhow::Result<ExitCode> {
    // `--json`'s indented answer, else `text`.
    let print = |text: String, v: serde_json::Value| match json {
        true => outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
        false => out!("{text}"),
    };
    match cmd {
        ScheduleCmd::Ls => {
            let all = c.schedules().await?;
            print(show_schedule::table(&all), serde_json::to_value(&all)?)?;
        }
        ScheduleCmd::Show { id } => {
            let s = c.schedule(id).await?;
            print(s.to_text(), serde_json::to_value(&s)?)?;
        }
        ScheduleCmd::Pause { id } | ScheduleCmd::Resume { id } => {
            let action = match cmd {
                ScheduleCmd::Pause { .. } => "pause",
                _ => "resume",
            };
            let s = c.schedule_action(id, action).await?;
            let state = match s.paused {
                true => "paused".to_string(),
                false => format!("next run {}", hetch_units::rfc3339_ms(s.next_at)),
            };
            print(format!("{id}: {state}\n"), serde_json::to_value(&s)?)?;
        }
        ScheduleCmd::Rm { id } => {
            let s = c.delete_schedule(id).await?;
            print(format!("{id}: deleted\n"), serde_json::to_value(&s)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
