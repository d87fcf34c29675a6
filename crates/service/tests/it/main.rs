//! The service's integration tests, one binary: the API over real HTTPS and the web
//! interface (one link of axum, sqlx and rustls instead of two).

mod common;

mod api;
mod fair;
mod login;
mod object_ranges;
mod openapi;
mod schedules;
mod web;
mod webhook;
