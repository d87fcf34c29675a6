//! The service's integration tests, one binary: the API over real HTTPS and the web
//! interface (one link of axum, sqlx and rustls instead of two).

mod common;

mod api;
mod fair;
mod login;
mod map_change;
mod object_ranges;
mod openapi;
mod retention;
mod schedules;
mod web;
mod webhook;
