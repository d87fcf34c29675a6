//! `hetch demo`: the main job on an embedded default. Starts a real server on loopback
//! in a temporary directory, makes a mixed dataset, pushes it over TLS, pulls it back,
//! checks every file by BLAKE3 and prints the throughput.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use hetch_engine::Options;
use hetch_net::SocketOptions;

use crate::client::ClientConfig;
use hetch_copy::CopyJob;

use crate::cp::{Outcome, Shown};
use crate::location::Location;
use crate::server::{ServeConfig, Server};
use crate::units::human_bytes;

/// Writes the demo dataset: one large file, medium files, many small files in nested
/// directories, empty files, a sparse file and a symlink. Returns its size in bytes.
pub fn make_dataset(root: &Path, large_mib: u64) -> anyhow::Result<u64> {
    let mut total = 0u64;
    let mut seed = 0x5eed_u64;
    let mut write = |p: &Path, n: u64| -> anyhow::Result<()> {
        std::fs::create_dir_all(p.parent().expect("has parent"))?;
        seed += 1;
        std::fs::write(p, pseudo_random(seed, n as usize))?;
        total += n;
        Ok(())
    };
    write(&root.join("large.bin"), large_mib << 20)?;
    for i in 0..64 {
        write(
            &root.join(format!("medium/m{i:03}.bin")),
            (1 << 20) + i * 4099,
        )?;
    }
    for i in 0..2000u64 {
        let p = root.join(format!("small/d{}/e{}/s{i:05}.dat", i % 10, i % 7));
        write(&p, 16 << 10)?;
    }
    for i in 0..10 {
        write(&root.join(format!("empty/e{i}")), 0)?;
    }
    std::fs::create_dir_all(root.join("empty/dir"))?;
    let sparse = std::fs::File::create(root.join("sparse.img"))?;
    sparse.set_len(64 << 20)?;
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"end", (64 << 20) - 3)?;
    std::os::unix::fs::symlink("large.bin", root.join("link-to-large"))?;
    Ok(total + (64 << 20))
}

fn pseudo_random(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Compares two trees file by file (BLAKE3 of contents, symlink targets); returns the
/// number of files checked.
pub fn verify_trees(a: &Path, b: &Path) -> anyhow::Result<u64> {
    let mut checked = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(a.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let (pa, pb) = (a.join(&r), b.join(&r));
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(r);
            } else if ft.is_symlink() {
                if std::fs::read_link(&pa)?
                    != std::fs::read_link(&pb).with_context(|| pb.display().to_string())?
                {
                    bail!("{}: symlink target differs", pb.display());
                }
            } else {
                let da = blake3::hash(&std::fs::read(&pa)?);
                let db =
                    blake3::hash(&std::fs::read(&pb).with_context(|| pb.display().to_string())?);
                if da != db {
                    bail!("{}: content differs ({} vs {})", pb.display(), da, db);
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// Runs the demo in `dir` (a new temporary directory when `None`).
pub async fn run(dir: Option<PathBuf>, large_mib: u64, keep: bool) -> anyhow::Result<()> {
    let tmp = match &dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            None
        }
        None => Some(tempfile::Builder::new().prefix("hetch-demo-").tempdir()?),
    };
    let base = dir
        .clone()
        .unwrap_or_else(|| tmp.as_ref().expect("temp dir").path().to_path_buf());
    let (data, root, pulled) = (
        base.join("dataset"),
        base.join("server-root"),
        base.join("pulled"),
    );
    std::fs::create_dir_all(&root)?;
    errln!(
        "hetch demo: making a mixed dataset in {} ...",
        data.display()
    );
    let bytes = make_dataset(&data, large_mib)?;
    let server = Server::bind(ServeConfig {
        root: crate::server::ServeRoot::Local(root.clone()),
        listen: "127.0.0.1:0".into(),
        state_dir: base.join("server-state"),
        token_file: None,
        socket: SocketOptions::default(),
        engine: Options::default(),
        limits: Default::default(),
        fair: Default::default(),
        metrics: None,
        relay: Default::default(),
    })
    .await?;
    let host = format!("127.0.0.1:{}", server.addr.port());
    errln!("hetch demo: server on {host}, key {}", server.fingerprint);
    let client = ClientConfig {
        token: hetch_net::read_token_file(&server.token_path)?,
        fingerprint: Some(server.fingerprint),
        known_hosts: None,
        socket: SocketOptions::default(),
        timeout: std::time::Duration::from_secs(30),
        opened: Default::default(),
        autotune: None,
        reuse: None,
    };
    tokio::spawn(server.run());
    let job = |sources: Vec<Location>, dest: Location| CopyJob {
        client: Some(client.clone()),
        ..CopyJob::new(sources, dest)
    };
    let shown = || Shown {
        json: false,
        progress: crate::ui::ProgressView::Bar,
        dest_shown: String::new(),
    };
    let remote = Location::Remote {
        host: host.clone(),
        path: "dataset".into(),
    };
    let t = Instant::now();
    errln!(
        "hetch demo: push {} over TLS to hetch://{host}/dataset",
        human_bytes(bytes as f64)
    );
    let push = crate::cp::run(
        job(vec![Location::Local(data.clone())], remote.clone()),
        shown(),
    )
    .await?;
    let push_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    errln!("hetch demo: pull it back into {}", pulled.display());
    let pull = crate::cp::run(job(vec![remote], Location::Local(pulled.clone())), shown()).await?;
    let pull_secs = t.elapsed().as_secs_f64();
    if matches!(push, Outcome::Partial) || matches!(pull, Outcome::Partial) {
        bail!("some files failed");
    }
    let n1 = verify_trees(&data, &root.join("dataset"))?;
    let n2 = verify_trees(&data, &pulled)?;
    outln!(
        "hetch demo: OK: {n1} files pushed and {n2} pulled back, all identical by BLAKE3; push {}/s, pull {}/s (TLS 1.3, block digests on)",
        human_bytes(bytes as f64 / push_secs),
        human_bytes(bytes as f64 / pull_secs),
    )?;
    if keep {
        if let Some(t) = tmp {
            let kept = t.keep();
            errln!("hetch demo: kept {}", kept.display());
        }
    }
    Ok(())
}
