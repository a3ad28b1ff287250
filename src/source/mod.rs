//! Pod sources: where the pods this node should run come from.
//!
//! The file source watches the static pod directory (`staticPodPath`) like the kubelet's
//! `pkg/kubelet/config/file.go`: one Pod manifest (YAML or JSON) per file, defaulted the way the
//! API server would default it, validated like `ValidatePodCreate`, named `<name>-<node>`, and
//! given a UID derived from its content, node and file path, so an unchanged manifest keeps its
//! UID across nodelet restarts (running containers are adopted) and an edited one gets a new UID
//! (the old pod is replaced).
//!
//! Every change produces a full [`SourceSnapshot`] (not a delta). Unlike the kubelet, a manifest
//! that breaks while a pod from it is running (an operator mid-edit) keeps its last good pod in
//! the snapshot; the error is reported next to it.
//!
//! Layout: [`field`] (paths and Go-shaped field errors), [`defaults`] (API defaulting),
//! [`validation`] (API validation and static-pod rules), [`manifest`] (decoding, naming, UID),
//! [`scan`] (one pass over the directory), [`watch`] (the long-running source).

pub mod defaults;
pub mod field;
pub mod validation;

pub use defaults::apply_defaults;
pub use field::{FieldError, FieldPath, FieldReason};
pub use validation::{validate_pod, validate_static_pod};
