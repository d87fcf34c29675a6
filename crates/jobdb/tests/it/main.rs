//! The job database's integration tests, one binary (each test binary links sqlx
//! and its drivers; one link instead of four): the API's rules on SQLite and
//! PostgreSQL, the lease model, and planning.

mod common;

mod deletion;
mod faults;
mod jobs;
mod model;
mod planning;
mod retention;
mod schedules;
mod webhooks;
