//! What the API takes and answers, as JSON: the types of [`hetch_service_api`] (its
//! clients share them), re-exported under their old paths.

pub use hetch_service_api::job::*;
pub use hetch_service_api::web::*;
pub use hetch_service_api::work::*;
