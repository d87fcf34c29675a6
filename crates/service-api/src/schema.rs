//! The JSON Schemas of every request and reply, generated from their types: the
//! `components/schemas` of the service's OpenAPI document, so that the document cannot
//! drift from what the service and its clients (de)serialize.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::{
    ClaimRequest, ClaimedUnit, ErrorBody, FileRow, FilesQuery, FinishReply, FinishRequest,
    HeartbeatReply, HeartbeatRequest, JobSpec, JobView, ListQuery,
};

/// Where the document keeps its schemas, as a `$ref` names them.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// The schemas of every request and reply, by name (the types they use, such as
/// `CopyOptions` and `UnitSpec`, among them), as OpenAPI 3.1's `components/schemas`
/// takes them: JSON Schema 2020-12, referring to each other by [`REF_PREFIX`].
pub fn components() -> Map<String, Value> {
    let mut g = generator();
    // The roots: each named type below them comes along.
    let _ = g.subschema_for::<JobSpec>();
    let _ = g.subschema_for::<JobView>();
    let _ = g.subschema_for::<ErrorBody>();
    let _ = g.subschema_for::<FileRow>();
    let _ = g.subschema_for::<ListQuery>();
    let _ = g.subschema_for::<FilesQuery>();
    let _ = g.subschema_for::<ClaimRequest>();
    let _ = g.subschema_for::<ClaimedUnit>();
    let _ = g.subschema_for::<HeartbeatRequest>();
    let _ = g.subschema_for::<HeartbeatReply>();
    let _ = g.subschema_for::<FinishRequest>();
    let _ = g.subschema_for::<FinishReply>();
    g.take_definitions(true)
}

/// The name `T`'s schema has among [`components`].
pub fn name_of<T: JsonSchema>() -> String {
    T::schema_name().into_owned()
}

/// A generator whose references point into `components/schemas`, and whose schemas
/// describe what a type takes when deserialized (what a serialized value always
/// satisfies too).
fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator()
}
