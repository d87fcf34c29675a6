//! Large files moved in ranges into an object store: the multipart upload all of a
//! file's range units put their parts into, and what each range reported when it was
//! done, for the file's commit unit to check and complete (see
//! `hetch_object::shared`).
//!
//! The upload is created by the first range unit that needs it and recorded here by
//! a compare-and-set ([`Db::claim_upload`]): the first id recorded wins, and is the
//! answer to every later claim, so that every worker puts its parts into one upload.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::{int, uint, Db, DbError};

/// What a done range unit reported of its parts (bounded and checked by the service:
/// at least one part, and part ids are printable and have no line breaks, since they
/// are stored one a line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRecord {
    /// Its first block.
    pub first: u64,
    /// One past its last block.
    pub end: u64,
    /// Its parts' bytes.
    pub size: u64,
    /// Its parts' ids, in order.
    pub parts: Vec<String>,
    /// Its blocks' BLAKE3 digests, hex, concatenated in block order.
    pub digests: String,
}

impl Db {
    /// Records `upload` as the multipart upload of file `file` of job `job`, unless
    /// one is recorded already: returns the one recorded (this one if it was first).
    pub async fn claim_upload(
        &self,
        job: &str,
        file: u64,
        upload: &str,
        now: u64,
    ) -> Result<String, DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO object_uploads (job, file, upload, created) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (job, file) DO NOTHING",
        )
        .bind(job)
        .bind(int(file))
        .bind(upload)
        .bind(int(now))
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query("SELECT upload FROM object_uploads WHERE job = $1 AND file = $2")
            .bind(job)
            .bind(int(file))
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(row.try_get("upload")?)
    }

    /// The multipart upload recorded for file `file` of job `job`, if any.
    pub async fn upload_of(&self, job: &str, file: u64) -> Result<Option<String>, DbError> {
        let row = sqlx::query("SELECT upload FROM object_uploads WHERE job = $1 AND file = $2")
            .bind(job)
            .bind(int(file))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("upload")).transpose()?)
    }

    /// The unit `unit`, with its planned bytes, if `worker` holds its lease unexpired
    /// at `now`, named by its id.
    pub async fn held_unit(
        &self,
        worker: &str,
        unit: &crate::UnitLease,
        now: u64,
    ) -> Result<Option<(crate::Claimed, u64)>, DbError> {
        let row = sqlx::query(
            "SELECT job, seq, kind, file_from, file_to, block_from, block_to, bytes, \
               attempts, lease_until, lease_id FROM units \
             WHERE job = $1 AND seq = $2 AND state = 'leased' AND lease_owner = $3 \
               AND lease_until > $4 AND lease_id = $5",
        )
        .bind(&unit.job)
        .bind(int(unit.seq))
        .bind(worker)
        .bind(int(now))
        .bind(&unit.lease)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let bytes = uint(r.try_get("bytes")?, "bytes")?;
        Ok(Some((crate::leases::claimed(&r)?, bytes)))
    }

    /// What the done ranges of file `file` of job `job` reported, in block order from
    /// block `from`, at most `limit` of them.
    pub async fn range_records(
        &self,
        job: &str,
        file: u64,
        from: u64,
        limit: u64,
    ) -> Result<Vec<RangeRecord>, DbError> {
        let rows = sqlx::query(
            "SELECT first_block, end_block, size, parts, digests FROM range_reports \
             WHERE job = $1 AND file = $2 AND first_block >= $3 \
             ORDER BY first_block LIMIT $4",
        )
        .bind(job)
        .bind(int(file))
        .bind(int(from))
        .bind(int(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record).collect()
    }
}

fn record(r: &AnyRow) -> Result<RangeRecord, DbError> {
    let get = |col: &str| -> Result<u64, DbError> { uint(r.try_get(col)?, col) };
    let parts: String = r.try_get("parts")?;
    Ok(RangeRecord {
        first: get("first_block")?,
        end: get("end_block")?,
        size: get("size")?,
        parts: parts.split('\n').map(str::to_string).collect(),
        digests: r.try_get("digests")?,
    })
}

/// Records what range unit `seq` of job `job` (its row `unit`, as the finish
/// returned it) reported, replacing what an earlier run of it reported.
pub(crate) async fn record_range(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    seq: u64,
    unit: &AnyRow,
    r: &RangeRecord,
) -> Result<(), DbError> {
    let file: i64 = unit.try_get("file_from")?;
    let parts = r.parts.join("\n");
    sqlx::query(
        "INSERT INTO range_reports (job, seq, file, first_block, end_block, size, parts, \
           digests) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (job, seq) DO UPDATE SET first_block = excluded.first_block, \
           end_block = excluded.end_block, size = excluded.size, parts = excluded.parts, \
           digests = excluded.digests",
    )
    .bind(job)
    .bind(int(seq))
    .bind(file)
    .bind(int(r.first))
    .bind(int(r.end))
    .bind(int(r.size))
    .bind(parts)
    .bind(&r.digests)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
