//! Where bytes come from and go to: the POSIX file system backend of hetch.
//!
//! - [`account`]: a local account, and file-system access with its rights from one
//!   thread (a root service listing a user's sources as that user).
//! - [`confined`]: directory handles through which a receiver resolves every name a
//!   peer sends, with no symlink followed and nothing outside reached.
//! - [`paths`]: turning wire paths into local paths, confined under a root (no `..`, no
//!   absolute paths, no symlink that leads out).
//! - [`walk`]: listing source operands as [`walk::SourceEntry`]s, lazily (memory does not
//!   grow with the tree).
//! - [`part`]: the receiving side's temporary "part" file, written with positional writes
//!   and renamed into place only when complete and checked.
//! - [`journal`]: the per-file record of verified block digests that makes resume work.
//! - [`direct`]: reads that bypass the page cache, to check what a device holds.
//! - [`holes`]: whether a block of a sparse source file lies in data or in a hole.
//! - [`uring`]: direct reads of many small files submitted together (io_uring).
//! - [`leftovers`]: finding and removing part files and journals no transfer holds.
//!
//! The contract every backend will share (list, stat, read_at, write_at, finalize) is
//! written down here with the first backend; object stores arrive as a second backend.

#![deny(missing_docs)]

pub mod account;
pub mod confined;
pub mod direct;
mod error;
pub mod holes;
pub mod journal;
pub mod leftovers;
mod listing;
pub mod meta;
pub mod part;
pub mod paths;
pub mod uring;
pub mod walk;
pub mod xattr;

pub use error::{kind_name, StorageError};
