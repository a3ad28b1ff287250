//! Kubernetes resource quantities.
