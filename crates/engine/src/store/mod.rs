//! The destinations the engine itself provides, behind the seam of `hetch-store`
//! (re-exported here: [`Store`], [`StoreFile`], [`origin::Origin`] and what they
//! pass): [`posix`], a directory tree (part file + journal + rename, every path
//! reached through handles confined to the destination), with the helpers it shares
//! with the sink (parent directories, split files, the writers of a file's blocks).

pub use hetch_store::*;

mod parents;
pub mod posix;
mod read_back;
mod sparse;
mod split;
mod unlocked;
mod writers;
