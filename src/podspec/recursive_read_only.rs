//! What a volume mount's `recursiveReadOnly` resolves to: the kubelet's
//! `resolveRecursiveReadOnly`, for the container's mounts (where an error refuses the
//! container) and for its status (where an error reads as not recursive).

use k8s_openapi::api::core::v1::VolumeMount;

/// Why a mount's `recursiveReadOnly` cannot be honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecursiveReadOnlyError {
    /// `Enabled` or `IfPossible` on a mount that is not `readOnly`.
    NotReadOnly,
    /// `Enabled` or `IfPossible` with a `mountPropagation` other than `None`.
    WithPropagation,
    /// `Enabled` on a runtime handler that does not declare recursive read-only mounts.
    NotSupported,
    /// A mode the API does not define.
    UnknownMode,
}

/// Whether `mount` is to be recursively read-only on a runtime handler that does
/// (`runtime_supports`) or does not declare recursive read-only mounts: `IfPossible` where it
/// does, `Enabled` there and an error where it does not, never without the field or with
/// `Disabled`.
pub fn resolve(
    mount: &VolumeMount,
    runtime_supports: bool,
) -> Result<bool, RecursiveReadOnlyError> {
    let mode = match mount.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if mount.read_only != Some(true) {
        return Err(RecursiveReadOnlyError::NotReadOnly);
    }
    if mount
        .mount_propagation
        .as_deref()
        .is_some_and(|p| p != "None")
    {
        return Err(RecursiveReadOnlyError::WithPropagation);
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(RecursiveReadOnlyError::NotSupported),
        _ => Err(RecursiveReadOnlyError::UnknownMode),
    }
}
