//! What is true of a shipped binary, checked with the system's own tools: static
//! (`ldd`, `file`), stripped, and its debug info in the `.debug` file it names.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use crate::cmd::{output, output_any};

/// Fails unless `ldd` says "not a dynamic executable" and `file` says statically
/// linked. Both, because on an x86_64 host ldd cannot load an aarch64 binary at all
/// and says the same of a dynamic one; `file` reads the ELF headers of either.
pub fn check_static(bin: &Path) -> Result<()> {
    let ldd = output_any(Command::new("ldd").arg(bin))?;
    if !ldd.contains("not a dynamic executable") {
        bail!("{} is not static: ldd says {:?}", bin.display(), ldd.trim());
    }
    let file = output(Command::new("file").arg("-b").arg(bin))?;
    if !file.contains("statically linked") || file.contains("interpreter") {
        bail!(
            "{} is not static: file says {:?}",
            bin.display(),
            file.trim()
        );
    }
    Ok(())
}

/// Fails unless `bin` has no debug sections and a .gnu_debuglink, and `debug` has the
/// DWARF (a .debug_info section with contents).
pub fn check_split(bin: &Path, debug: &Path) -> Result<()> {
    let sections = output(Command::new("readelf").arg("-SW").arg(bin))?;
    // .debug_gdb_scripts is loaded with the program (it names gdb's pretty-printers
    // for Rust's types), so strip keeps it: it is not debug info.
    let names = sections
        .split_whitespace()
        .filter(|w| w.starts_with(".debug_") && *w != ".debug_gdb_scripts");
    if let Some(name) = names.into_iter().next() {
        bail!("{} still has debug info: {name}", bin.display());
    }
    if !sections.contains(".gnu_debuglink") {
        bail!("{} has no .gnu_debuglink", bin.display());
    }
    if !output(Command::new("file").arg("-b").arg(bin))?.contains(", stripped") {
        bail!("{} is not stripped (file says so)", bin.display());
    }
    let dbg = output(Command::new("readelf").arg("-SW").arg(debug))?;
    let has_dwarf = dbg.lines().any(|l| {
        // "[Nr] Name Type Address Off Size ...": a NOBITS .debug_info would be empty.
        l.contains(" .debug_info ") && l.contains("PROGBITS")
    });
    if !has_dwarf {
        bail!("{} holds no debug info (.debug_info)", debug.display());
    }
    Ok(())
}
