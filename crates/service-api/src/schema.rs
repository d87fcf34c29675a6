//! The JSON Schemas of every request and reply, generated from their types: the
//! `components/schemas` of the service's OpenAPI document, so that the document cannot
//! drift from what the service and its clients (de)serialize.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::{
    ActivityView, ClaimRequest, ClaimedUnit, ErrorBody, FileRow, FilesQuery, FinishAll,
    FinishAllReply, FinishReply, FinishRequest, HeartbeatReply, HeartbeatRequest, JobSpec, JobView,
    ListQuery, LiveSnapshot, NodesView, ScheduleSpec, ScheduleView, SessionView,
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
    let _ = g.subschema_for::<FinishAll>();
    let _ = g.subschema_for::<FinishAllReply>();
    let _ = g.subschema_for::<crate::UploadRequest>();
    let _ = g.subschema_for::<crate::UploadReply>();
    let _ = g.subschema_for::<crate::RangesRequest>();
    let _ = g.subschema_for::<crate::RangesReply>();
    let _ = g.subschema_for::<SessionView>();
    let _ = g.subschema_for::<LiveSnapshot>();
    let _ = g.subschema_for::<NodesView>();
    let _ = g.subschema_for::<ActivityView>();
    let _ = g.subschema_for::<ScheduleSpec>();
    let _ = g.subschema_for::<ScheduleView>();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` under `v`.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_request_and_reply_has_a_schema_and_every_reference_resolves() {
        let c = components();
        for name in [
            name_of::<JobSpec>(),
            name_of::<JobView>(),
            name_of::<FileRow>(),
            name_of::<ClaimRequest>(),
            name_of::<ClaimedUnit>(),
            name_of::<HeartbeatRequest>(),
            name_of::<HeartbeatReply>(),
            name_of::<FinishRequest>(),
            name_of::<FinishReply>(),
            name_of::<FinishAll>(),
            name_of::<FinishAllReply>(),
            "FinishAnswer".to_string(),
            name_of::<SessionView>(),
            name_of::<LiveSnapshot>(),
            name_of::<NodesView>(),
            name_of::<ActivityView>(),
            "Error".to_string(),
            "CopyOptions".to_string(),
            "UnitSpec".to_string(),
            "HeldUnit".to_string(),
            "Access".to_string(),
            "JobSummary".to_string(),
            "NodeView".to_string(),
            "ServiceHost".to_string(),
            "ShareView".to_string(),
            "FailedUnitView".to_string(),
        ] {
            assert!(c.contains_key(&name), "{name} missing: {:?}", c.keys());
        }
        let mut all = Vec::new();
        refs(&Value::Object(c.clone()), &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r.strip_prefix(REF_PREFIX).unwrap_or_else(|| panic!("{r}"));
            assert!(c.contains_key(name), "{r} does not resolve");
        }
        // Requests refuse what they do not know, as the service does.
        assert_eq!(c["JobSpec"]["additionalProperties"], false);
        assert_eq!(c["FinishRequest"]["additionalProperties"], false);
    }
}
