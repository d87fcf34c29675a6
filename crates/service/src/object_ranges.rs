//! The work routes of large files moved in ranges into an object store as one
//! multipart upload (see `hetch_service_api::object_ranges`): a range unit records
//! or learns its file's upload (`POST /api/work/upload`), reports its parts when it
//! is done (the `range` field of its finish), and the file's commit unit reads them
//! back (`POST /api/work/ranges`). Only the worker holding the unit's lease is
//! answered; everything a worker sends is bounded and checked before it is stored.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use hetch_jobdb::RangeRecord;
use hetch_jobs::UnitSpec;
use hetch_service_api::object_ranges::MAX_RANGES_PAGE;
use hetch_service_api::{
    FinishRequest, RangeReport, RangesReply, RangesRequest, ReportedRange, UploadReply,
    UploadRequest,
};

use crate::routes::{bad, fail, internal, parse, Answer, ApiError};
use crate::work::{check_worker, unit_lease};
use crate::{now_ms, AppState};

/// The unit `seq` of `job` that `worker` holds under lease id `lease`, with its
/// planned bytes, or a 409.
async fn held(
    state: &AppState,
    worker: &str,
    (job, seq, lease): (&str, u64, &str),
) -> Result<(UnitSpec, u64), ApiError> {
    let unit = unit_lease(job, seq, lease)?;
    let held = state.db.held_unit(worker, &unit, now_ms()).await;
    match held.map_err(internal)? {
        Some((c, bytes)) => Ok((c.spec, bytes)),
        None => Err(fail(
            StatusCode::CONFLICT,
            format!("unit {seq} of job {job} is not yours"),
        )),
    }
}

/// `POST /api/work/upload`: the file's upload, recorded from this request if none is.
pub(crate) async fn upload(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: UploadRequest = parse(&body)?;
    check_worker(&req.worker)?;
    hetch_service_api::object_ranges::check_upload(&req.upload).map_err(bad)?;
    let (spec, _) = held(&state, &req.worker, (&req.job, req.seq, &req.lease)).await?;
    let UnitSpec::Range { file, .. } = spec else {
        return Err(bad(format!("seq: unit {} is not a range", req.seq)));
    };
    let upload = state
        .db
        .claim_upload(&req.job, file, &req.upload, now_ms())
        .await
        .map_err(internal)?;
    Ok(Json(UploadReply { upload }).into_response())
}

/// `POST /api/work/ranges`: a page of what the commit unit's file's ranges reported.
pub(crate) async fn ranges(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: RangesRequest = parse(&body)?;
    check_worker(&req.worker)?;
    let (spec, _) = held(&state, &req.worker, (&req.job, req.seq, &req.lease)).await?;
    let UnitSpec::Commit { file, .. } = spec else {
        return Err(bad(format!("seq: unit {} is not a commit", req.seq)));
    };
    let db = &state.db;
    let upload = db.upload_of(&req.job, file).await.map_err(internal)?;
    let page = MAX_RANGES_PAGE as u64;
    let records = db.range_records(&req.job, file, req.from, page).await;
    let records = records.map_err(internal)?;
    let next = (records.len() == MAX_RANGES_PAGE)
        .then(|| records.last().map(|r| r.end))
        .flatten();
    let ranges = records.into_iter().map(reported).collect();
    Ok(Json(RangesReply {
        upload,
        ranges,
        next,
    })
    .into_response())
}

fn reported(r: RangeRecord) -> ReportedRange {
    let digests = r
        .digests
        .as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    ReportedRange {
        first: r.first,
        end: r.end,
        size: r.size,
        parts: r.parts,
        digests,
    }
}

/// A done range unit's report, checked against the unit the worker holds (a range,
/// of its blocks and bytes, into its file's recorded upload), as the database
/// records it; a 400 naming the field when it does not fit. `None` when the worker
/// does not hold the unit: the finish itself then answers why.
pub(crate) async fn checked_report(
    state: &AppState,
    req: &FinishRequest,
    r: &RangeReport,
) -> Result<Option<RangeRecord>, ApiError> {
    let Ok((spec, bytes)) = held(state, &req.worker, (&req.job, req.seq, &req.lease)).await else {
        return Ok(None);
    };
    let UnitSpec::Range { file, first, end } = spec else {
        return Err(bad(format!("range: unit {} is not a range", req.seq)));
    };
    r.check(end.saturating_sub(first), bytes).map_err(bad)?;
    let upload = state.db.upload_of(&req.job, file).await.map_err(internal)?;
    if upload.as_deref() != Some(r.upload.as_str()) {
        return Err(bad("range.upload: not the upload recorded for the file"));
    }
    Ok(Some(RangeRecord {
        first,
        end,
        size: r.size,
        parts: r.parts.clone(),
        digests: r.digests.concat(),
    }))
}
