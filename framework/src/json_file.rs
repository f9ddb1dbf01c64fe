//! Files the framework writes for people: names made safe for the file
//! system, and JSON written whole (flight-recorder dumps, timelines).

use hccl_platform::{HcclError, Result};

/// `name` with everything but ASCII letters, digits, `-` and `_` replaced,
/// for file names.
pub(crate) fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `json` to `path` (its directory made if missing), through a
/// temporary file renamed into place so a reader never sees half a file.
pub(crate) fn write_json_file(path: &std::path::Path, json: &serde_json::Value) -> Result<()> {
    let bytes = serde_json::to_vec(json)
        .map_err(|e| HcclError::internal(format!("{}: {e}", path.display())))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| HcclError::syscall(format!("creating {}: {e}", parent.display())))?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| HcclError::syscall(format!("writing {}: {e}", path.display())))
}
