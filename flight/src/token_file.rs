//! Where a cluster's token is kept for the user who started it.
//!
//! Loopback is not a security boundary: any local user can connect to a
//! port on 127.0.0.1. A coordinator started without a token therefore makes
//! one (as Jupyter does) and writes it to a file only its user can read,
//! one file per address it listens on; the `weir` CLI and workers started
//! by the same user find it there by the address they connect to, so
//! nothing changes for them, while other users get `401`.
//!
//! The folder is `$WEIR_TOKEN_DIR`, else `$XDG_RUNTIME_DIR/weir`, else
//! `~/.weir` (mode 0700); each file is `token-HOST-PORT` (mode 0600).

use std::io::Write;
use std::path::PathBuf;

use weir_core::{Result, Secret, WeirError};

/// The folder token files live in.
pub fn folder() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_TOKEN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("weir");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".weir"),
        None => std::env::temp_dir().join("weir-tokens"),
    }
}

/// The token file of a coordinator reached at `address` (`host:port`, or
/// a URL such as `http://127.0.0.1:8081`).
pub fn path_for(address: &str) -> PathBuf {
    let bare = address
        .split_once("://")
        .map_or(address, |(_, rest)| rest)
        .trim_end_matches('/');
    let name: String = bare
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    folder().join(format!("token-{name}"))
}

/// Write `token` to the token file of each address, readable by this user
/// only; returns the files written.
pub fn write(token: &Secret, addresses: &[String]) -> Result<Vec<PathBuf>> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = folder();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| WeirError::io(dir.display().to_string(), e))?;
    let mut written = Vec::new();
    for address in addresses {
        let path = path_for(address);
        // Written aside and renamed, so a reader never sees half a token,
        // and created 0600 so it is never readable by others meanwhile.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |e| WeirError::io(path.display().to_string(), e);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
        f.write_all(token.expose().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

/// The token of the coordinator at `address`, when this user has its file.
/// A file others can read is refused rather than trusted.
pub fn read(address: &str) -> Result<Option<Secret>> {
    use std::os::unix::fs::PermissionsExt;
    let path = path_for(address);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WeirError::io(path.display().to_string(), e)),
    };
    let mode = std::fs::metadata(&path)
        .map_err(|e| WeirError::io(path.display().to_string(), e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(WeirError::Config(format!(
            "token file {} is readable by other users (mode {:o}); chmod 600 it",
            path.display(),
            mode & 0o777
        )));
    }
    Secret::new(text.trim()).map(Some)
}

/// Remove token files (a coordinator shutting down); missing ones are fine.
pub fn remove(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_their_files() {
        assert_eq!(
            path_for("http://127.0.0.1:8081/"),
            path_for("127.0.0.1:8081")
        );
        let name = path_for("127.0.0.1:8081");
        assert!(name.ends_with("token-127.0.0.1-8081"), "{}", name.display());
        assert_ne!(path_for("127.0.0.1:8081"), path_for("127.0.0.1:8082"));
    }
}
